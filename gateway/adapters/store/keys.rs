//! Key records already read, so authenticating a request usually costs no store read. Only keys that exist
//! are cached (a flood of made-up keys cannot grow it). Any change to the keys this process makes or hears
//! of empties it and bumps the generation; a reader caches what it read only if no change happened
//! meanwhile, so a revoked key is never served from the cache after its revocation is known. Where other
//! processes change keys too, a record is also read again once it is `max_age` old, in case a change was
//! not heard of. Records are shared, not copied: a request's authentication allocates nothing.

use crate::domain::tasks::KeyRecord;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(crate) struct KeyCache {
    inner: RwLock<Cached>,
    max_age: Option<Duration>,
}

#[derive(Default)]
struct Cached {
    generation: u64,
    records: HashMap<[u8; 32], (Instant, Arc<KeyRecord>)>,
}

impl KeyCache {
    pub(crate) fn with_max_age(max_age: Duration) -> KeyCache {
        KeyCache { max_age: Some(max_age), ..KeyCache::default() }
    }

    /// The current generation, and the record if it is cached and fresh.
    pub(crate) fn get(&self, hash: &[u8; 32]) -> (u64, Option<Arc<KeyRecord>>) {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let fresh = |read: &Instant| self.max_age.is_none_or(|max| read.elapsed() < max);
        let record = inner.records.get(hash).filter(|(read, _)| fresh(read)).map(|(_, record)| record.clone());
        (inner.generation, record)
    }

    /// Caches `record`, read at `generation`, unless the keys changed since.
    pub(crate) fn put(&self, generation: u64, hash: [u8; 32], record: Arc<KeyRecord>) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.generation == generation {
            inner.records.insert(hash, (Instant::now(), record));
        }
    }

    pub(crate) fn invalidate(&self) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.generation += 1;
        inner.records.clear();
    }
}
