//! The write transaction store code sees: redb's, with every insert and remove also recorded for the
//! write-ahead log. Tables only deref to redb's for reading, so a change that skips the log cannot compile.

use super::{StoreError, wal};
use redb::{Key, TableDefinition, TableHandle, Value, WriteTransaction};
use std::borrow::Borrow;
use std::cell::RefCell;
use std::ops::Deref;

pub struct Tx<'a> {
    inner: &'a WriteTransaction,
    changes: RefCell<Vec<u8>>,
}

impl<'a> Tx<'a> {
    /// `changes`: those already recorded in `inner` (a transaction left open across batches), or none.
    pub(crate) fn new(inner: &'a WriteTransaction, changes: Vec<u8>) -> Tx<'a> {
        Tx { inner, changes: RefCell::new(changes) }
    }

    pub(crate) fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<'static, K, V>,
    ) -> Result<Table<'_, K, V>, StoreError> {
        Ok(Table { table: self.inner.open_table(definition)?, definition, changes: &self.changes })
    }

    /// The changes recorded so far, in the log's encoding.
    pub(crate) fn into_changes(self) -> Vec<u8> {
        self.changes.into_inner()
    }
}

pub struct Table<'t, K: Key + 'static, V: Value + 'static> {
    table: redb::Table<'t, K, V>,
    definition: TableDefinition<'static, K, V>,
    changes: &'t RefCell<Vec<u8>>,
}

impl<K: Key + 'static, V: Value + 'static> Table<'_, K, V> {
    pub(crate) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), StoreError> {
        let (key, value) = (key.borrow(), value.borrow());
        let mut changes = self.changes.borrow_mut();
        wal::encode_change(
            &mut changes,
            self.definition.name(),
            K::as_bytes(key).as_ref(),
            Some(V::as_bytes(value).as_ref()),
        );
        self.table.insert(key, value)?;
        Ok(())
    }

    pub(crate) fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<(), StoreError> {
        let key = key.borrow();
        wal::encode_change(&mut self.changes.borrow_mut(), self.definition.name(), K::as_bytes(key).as_ref(), None);
        self.table.remove(key)?;
        Ok(())
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> Deref for Table<'t, K, V> {
    type Target = redb::Table<'t, K, V>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}
