//! `cargo run -p mediagate-codegen --bin spec-check -- spec`: checks a spec directory and prints every problem.

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "spec".into());
    match mediagate_codegen::Spec::load(std::path::Path::new(&dir)) {
        Ok(spec) => {
            println!("{dir}: {} operations, {} models: ok", spec.operations.len(), spec.models.len());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprint!("{errors}");
            ExitCode::FAILURE
        }
    }
}
