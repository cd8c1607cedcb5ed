//! Generates the gateway's typed requests, schemas and route table from `spec/` (see the codegen crate).

fn main() {
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    // MEDIAGATE_SPEC_DIR points the build at another spec (tests of the generator, experiments).
    println!("cargo:rerun-if-env-changed=MEDIAGATE_SPEC_DIR");
    let spec_dir = std::env::var("MEDIAGATE_SPEC_DIR").unwrap_or_else(|_| "spec".into());
    println!("cargo:rerun-if-changed={spec_dir}");
    match mediagate_codegen::emit(std::path::Path::new(&spec_dir), &out_dir) {
        Ok(files) => {
            for file in files {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
        Err(errors) => {
            for line in errors.to_string().lines() {
                println!("cargo:warning={line}");
            }
            eprintln!("{errors}");
            std::process::exit(1);
        }
    }
}
