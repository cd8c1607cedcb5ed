//! Generates the gateway's typed requests, schemas and route table from `spec/` (see the codegen crate), and
//! holds the published contract to its lock (`spec/published.lock.json`): a breaking change fails the build.

use mediagate_codegen::lock;
use std::path::Path;

fn main() {
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    // MEDIAGATE_SPEC_DIR points the build at another spec (tests of the generator, experiments).
    println!("cargo:rerun-if-env-changed=MEDIAGATE_SPEC_DIR");
    let spec_dir = std::env::var("MEDIAGATE_SPEC_DIR").unwrap_or_else(|_| "spec".into());
    println!("cargo:rerun-if-changed={spec_dir}");
    let spec = match mediagate_codegen::emit(Path::new(&spec_dir), &out_dir) {
        Ok(spec) => spec,
        Err(errors) => fail(&errors.to_string()),
    };
    for file in &spec.files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    for file in [lock::LOCK_FILE, lock::INTENDED_FILE] {
        println!("cargo:rerun-if-changed={spec_dir}/{file}");
    }
    match lock::check(Path::new(&spec_dir), &spec) {
        Ok(verdict) if !verdict.breaking.is_empty() => fail(&verdict.report()),
        Ok(verdict) if !verdict.current() => {
            println!(
                "cargo:warning=the published contract changed compatibly (or has no lock yet): run `cargo run -- schemas lock` to write {spec_dir}/{}",
                lock::LOCK_FILE
            );
        }
        Ok(_) => {}
        Err(error) => fail(&error),
    }
}

fn fail(errors: &str) -> ! {
    for line in errors.lines() {
        println!("cargo:warning={line}");
    }
    eprintln!("{errors}");
    std::process::exit(1);
}
