//! Admission on arbitrary bodies, at every submit endpoint: each is admitted or refused with an error in
//! the catalogue, never a panic.
#![no_main]

use std::sync::OnceLock;

fn registry() -> &'static mediagate::domain::registry::Registry {
    static REGISTRY: OnceLock<mediagate::domain::registry::Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| mediagate::domain::registry::Registry::new(Vec::new()).unwrap_or_else(|e| panic!("{e}")))
}

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(bytes) else { return };
    for endpoint in mediagate::domain::catalog::ENDPOINTS {
        let _ = mediagate::domain::admission::admit(registry(), endpoint, body.clone());
    }
});
