//! Scenario `poller_scale` (being built).

pub fn run() -> String {
    String::new()
}
