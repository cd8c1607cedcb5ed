//! Scenario `restart` (being built).

pub fn run() -> String {
    String::new()
}
