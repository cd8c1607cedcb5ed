//! The store's recent changes, in memory over redb.
//!
//! The writer never writes redb itself: a batch's changes go to the log and into the newest *layer* of
//! this overlay, where every reader sees them. Every so often the writer freezes that layer (a new empty
//! one takes its place) and the checkpointer (`checkpointer`) commits it to redb, durably, in one
//! transaction, then drops it. A key changed many times in between reaches redb once, and no request
//! waits for a redb commit.
//!
//! A [`View`] reads the layers, newest first, then a redb read transaction. It is taken under the lock
//! that guards the list of layers, and a layer leaves the list only once its commit is visible: so every
//! change is either in a layer the view holds or in its redb snapshot (or both, with the same value).

use super::StoreError;
use super::tables::{self, ALL};
use redb::{
    AccessGuard, Database, Key, ReadOnlyTable, ReadTransaction, ReadableDatabase, TableDefinition, TableHandle, Value,
};
use std::borrow::Borrow;
use std::cell::{OnceCell, RefCell};
use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

/// One table's changed keys, in stored byte form: the new value, or `None` for a removal.
type Entries = HashMap<Box<[u8]>, Option<Box<[u8]>>, foldhash::fast::RandomState>;
/// One changed key, as [`Entries`] holds it.
type Change = (Box<[u8]>, Option<Box<[u8]>>);

/// Changed keys of every table.
#[derive(Default, Clone)]
pub(crate) struct Changes {
    tables: [Entries; tables::COUNT],
}

/// What a key was in a [`Changes`] before a change: absent, or the recorded change.
pub(crate) type Previous = Option<Option<Box<[u8]>>>;

impl Changes {
    /// `Some(None)` if the key was removed, `None` if it is not among the changes.
    fn get(&self, table: usize, key: &[u8]) -> Option<Option<&[u8]>> {
        self.tables[table].get(key).map(Option::as_deref)
    }

    /// Records a change; returns what was recorded for the key before (for [`Changes::restore`]).
    pub(crate) fn put(&mut self, table: usize, key: &[u8], value: Option<&[u8]>) -> Previous {
        let value = value.map(Into::into);
        // A key changed again (an account's funds, many times a batch) keeps the copy it has.
        match self.tables[table].get_mut(key) {
            Some(recorded) => Some(std::mem::replace(recorded, value)),
            None => self.tables[table].insert(key.into(), value),
        }
    }

    /// Undoes a [`Changes::put`].
    pub(crate) fn restore(&mut self, table: usize, key: &[u8], previous: Previous) {
        match previous {
            Some(previous) => drop(self.tables[table].insert(key.into(), previous)),
            None => drop(self.tables[table].remove(key)),
        }
    }

    /// Takes over every change of `newer`, which wins where both changed a key, and leaves it empty with its
    /// room kept.
    fn absorb(&mut self, newer: &mut Changes) {
        for (table, entries) in newer.tables.iter_mut().enumerate() {
            self.tables[table].extend(entries.drain());
        }
    }

    /// No change, and room for as many as these.
    fn room(&self) -> Changes {
        let hasher = foldhash::fast::RandomState::default;
        Changes {
            tables: std::array::from_fn(|table| Entries::with_capacity_and_hasher(self.tables[table].len(), hasher())),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tables.iter().all(Entries::is_empty)
    }

    /// One table's changes in its key order.
    pub(crate) fn sorted(&self, table: usize) -> Vec<(&[u8], Option<&[u8]>)> {
        let mut entries: Vec<_> = self.tables[table].iter().map(|(k, v)| (&**k, v.as_deref())).collect();
        entries.sort_unstable_by(|a, b| ALL[table].compare(a.0, b.0));
        entries
    }
}

/// One layer of changes: the newest takes the writer's batches; older ones are frozen, waiting for (or
/// under) their checkpoint.
#[derive(Default)]
pub(crate) struct Layer(RwLock<Changes>);

impl Layer {
    pub(crate) fn changes(&self) -> RwLockReadGuard<'_, Changes> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every layer, newest first.
pub(crate) struct Overlay(RwLock<VecDeque<Arc<Layer>>>);

impl Overlay {
    pub(crate) fn new() -> Overlay {
        Overlay(RwLock::new(VecDeque::from([Arc::default()])))
    }

    fn layers(&self) -> RwLockReadGuard<'_, VecDeque<Arc<Layer>>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A consistent view of the store: see the module doc.
    pub(crate) fn view(&self, db: &Database) -> Result<View, StoreError> {
        let layers = self.layers();
        Ok(View { layers: layers.iter().cloned().collect(), read: db.begin_read()? })
    }

    /// A view nothing changes once it is taken (a plain view keeps seeing what is published to the newest
    /// layer): the newest layer is copied, whole batches only, since a publish takes its lock for a batch.
    pub(crate) fn snapshot(&self, db: &Database) -> Result<View, StoreError> {
        let layers = self.layers();
        let mut held: Vec<Arc<Layer>> = layers.iter().cloned().collect();
        if let Some(newest) = held.first_mut() {
            let copy = newest.changes().clone();
            *newest = Arc::new(Layer(RwLock::new(copy)));
        }
        Ok(View { layers: held, read: db.begin_read()? })
    }

    /// Makes a batch's changes visible; `changes` is left empty, its room kept for the next batch.
    pub(crate) fn publish(&self, changes: &mut Changes) {
        if let Some(newest) = self.layers().front() {
            newest.0.write().unwrap_or_else(PoisonError::into_inner).absorb(changes);
        }
    }

    /// Whether a frozen layer is still waiting for (or under) its checkpoint.
    pub(crate) fn checkpointing(&self) -> bool {
        self.layers().len() > 1
    }

    /// Freezes the newest layer (a new empty one, with room for as many changes, takes the writer's
    /// batches) and returns it.
    pub(crate) fn freeze(&self) -> Arc<Layer> {
        let mut layers = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let room = layers.front().map(|newest| newest.changes().room()).unwrap_or_default();
        layers.push_front(Arc::new(Layer(RwLock::new(room))));
        layers[1].clone()
    }

    /// Drops the oldest layer, once its changes are committed to redb.
    pub(crate) fn release(&self) {
        let mut layers = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let released = if layers.len() > 1 { layers.pop_back() } else { None };
        drop(layers);
        drop(released); // freed outside the lock: it may hold thousands of changes
    }
}

/// The store as of its creation (and the changes published since to the newest layer it holds).
pub(crate) struct View {
    layers: Vec<Arc<Layer>>,
    read: ReadTransaction,
}

impl View {
    pub(crate) fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<'static, K, V>,
    ) -> Result<ReadTable<'_, K, V>, StoreError> {
        self.table(definition, None)
    }

    /// A table as seen through `staged` (a writer's changes not published yet) first.
    pub(crate) fn table<'v, K: Key + 'static, V: Value + 'static>(
        &'v self,
        definition: TableDefinition<'static, K, V>,
        staged: Option<&'v RefCell<Changes>>,
    ) -> Result<ReadTable<'v, K, V>, StoreError> {
        Ok(ReadTable {
            layers: &self.layers,
            staged,
            id: tables::id(definition.name())?,
            read: &self.read,
            definition,
            redb: OnceCell::new(),
        })
    }
}

/// A stored key or value, from a layer or from redb.
pub enum Stored<T: Value + 'static> {
    Bytes(Box<[u8]>, PhantomData<T>),
    Guard(AccessGuard<'static, T>),
}

impl<T: Value + 'static> Stored<T> {
    pub fn value(&self) -> T::SelfType<'_> {
        match self {
            Stored::Bytes(bytes, _) => T::from_bytes(bytes),
            Stored::Guard(guard) => guard.value(),
        }
    }

    fn owned(bytes: Box<[u8]>) -> Stored<T> {
        Stored::Bytes(bytes, PhantomData)
    }
}

/// A table as a [`View`] sees it.
pub struct ReadTable<'v, K: Key + 'static, V: Value + 'static> {
    layers: &'v [Arc<Layer>],
    staged: Option<&'v RefCell<Changes>>,
    id: usize,
    read: &'v ReadTransaction,
    definition: TableDefinition<'static, K, V>,
    /// Opened on first use: most of a write's reads are answered by the layers.
    redb: OnceCell<ReadOnlyTable<K, V>>,
}

/// A row as the layers have it: `Some(None)` if removed, `None` if they do not have the key.
type Found = Option<Option<Box<[u8]>>>;

/// A stored row.
pub type Row<K, V> = (Stored<K>, Stored<V>);

impl<K: Key + 'static, V: Value + 'static> ReadTable<'_, K, V> {
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    fn redb(&self) -> Result<&ReadOnlyTable<K, V>, StoreError> {
        if let Some(table) = self.redb.get() {
            return Ok(table);
        }
        let table = self.read.open_table(self.definition)?;
        Ok(self.redb.get_or_init(|| table))
    }

    fn in_layers(&self, key: &[u8]) -> Found {
        if let Some(staged) = self.staged
            && let Some(found) = staged.borrow().get(self.id, key)
        {
            return Some(found.map(Into::into));
        }
        self.layers.iter().find_map(|layer| layer.changes().get(self.id, key).map(|found| found.map(Into::into)))
    }

    pub(crate) fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<Stored<V>>, StoreError> {
        let key = key.borrow();
        match self.in_layers(K::as_bytes(key).as_ref()) {
            Some(found) => Ok(found.map(Stored::owned)),
            None => Ok(self.redb()?.get(key)?.map(Stored::Guard)),
        }
    }

    /// Every row in key order.
    pub(crate) fn iter(&self) -> Result<Rows<K, V>, StoreError> {
        let changed = self.changed(|_| true);
        let stored = self.redb()?.range::<K::SelfType<'_>>(..)?.peekable();
        Ok(Rows { stored, changed, descending: false, rows: PhantomData })
    }

    /// The rows from `low` (inclusive) to `high` (exclusive), in descending key order.
    pub(crate) fn range_back<'k>(
        &self,
        low: impl Borrow<K::SelfType<'k>>,
        high: impl Borrow<K::SelfType<'k>>,
    ) -> Result<RowsBack<K, V>, StoreError> {
        let (low, high) = (low.borrow(), high.borrow());
        let (low_bytes, high_bytes) = (K::as_bytes(low), K::as_bytes(high));
        let (low_bytes, high_bytes) = (low_bytes.as_ref(), high_bytes.as_ref());
        let mut changed: Vec<Change> =
            self.changed(|key| K::compare(key, low_bytes).is_ge() && K::compare(key, high_bytes).is_lt()).collect();
        changed.reverse();
        let stored = self.redb()?.range::<&K::SelfType<'_>>(low..high)?.rev().peekable();
        Ok(Rows { stored, changed: changed.into_iter().peekable(), descending: true, rows: PhantomData })
    }

    /// The newest change of each key `keep` keeps that the layers (and the staged changes) have, in key order.
    fn changed(&self, keep: impl Fn(&[u8]) -> bool) -> std::iter::Peekable<std::vec::IntoIter<Change>> {
        // Oldest layer first so newer ones overwrite.
        let mut changed = Entries::default();
        let mut take = |entries: &Entries| {
            changed.extend(entries.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k.clone(), v.clone())));
        };
        for layer in self.layers.iter().rev() {
            take(&layer.changes().tables[self.id]);
        }
        if let Some(staged) = self.staged {
            take(&staged.borrow().tables[self.id]);
        }
        let mut changed: Vec<_> = changed.into_iter().collect();
        changed.sort_by(|a, b| K::compare(&a.0, &b.0));
        changed.into_iter().peekable()
    }
}

/// The rows of a [`ReadTable`]: redb's (`I`), with the layers' changes merged in.
pub struct Rows<K: Key + 'static, V: Value + 'static, I: Iterator = redb::Range<'static, K, V>> {
    stored: std::iter::Peekable<I>,
    changed: std::iter::Peekable<std::vec::IntoIter<Change>>,
    /// Both come in descending key order.
    descending: bool,
    rows: PhantomData<(K, V)>,
}

/// [`Rows`] in descending key order.
pub type RowsBack<K, V> = Rows<K, V, std::iter::Rev<redb::Range<'static, K, V>>>;

type StoredRow<K, V> = Result<(AccessGuard<'static, K>, AccessGuard<'static, V>), redb::StorageError>;

impl<K: Key + 'static, V: Value + 'static, I: Iterator<Item = StoredRow<K, V>>> Iterator for Rows<K, V, I> {
    type Item = Result<Row<K, V>, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (self.changed.peek(), self.stored.peek()) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), Some(Err(_))) => Ordering::Greater,
                (Some((changed, _)), Some(Ok((stored, _)))) => {
                    let order = K::compare(changed, K::as_bytes(&stored.value()).as_ref());
                    if self.descending { order.reverse() } else { order }
                }
            };
            if order.is_ge() {
                let row = self.stored.next()?;
                if order.is_gt() {
                    return Some(row.map(|(k, v)| (Stored::Guard(k), Stored::Guard(v))).map_err(Into::into));
                }
            }
            let (key, value) = self.changed.next()?;
            if let Some(value) = value {
                return Some(Ok((Stored::owned(key), Stored::owned(value))));
            }
        }
    }
}
