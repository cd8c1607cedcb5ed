//! The transaction a write runs in: a [`View`] of the store with the batch's own changes staged over it.
//! Every insert and remove is staged (later reads in the batch see it), recorded for the write-ahead log
//! and noted for undoing; tables only deref to their read side, so a change that skips the log cannot
//! compile. The writer publishes what a batch staged to the overlay once the batch is logged.

use super::overlay::{Changes, Previous, ReadTable, View};
use super::{StoreError, tables, wal};
use redb::{Key, TableDefinition, Value};
use std::borrow::Borrow;
use std::cell::RefCell;
use std::ops::{Deref, Range};

pub struct Tx<'v> {
    view: &'v View,
    staged: RefCell<Changes>,
    /// The log record the changes are added to.
    log: RefCell<wal::Record>,
    /// What each change replaced in `staged`, to undo a write that fails.
    undo: RefCell<Vec<Undo>>,
    /// What a write changed outside the store and must put right if it is undone (see [`Tx::on_undo`]).
    undo_outside: RefCell<Vec<Box<dyn FnOnce()>>>,
}

/// A change's table, where its key lies in the log record, and what it replaced.
type Undo = (usize, Range<usize>, Previous);

/// How far a [`Tx`] had got, to roll a failed write back to.
pub(crate) struct Mark {
    log: usize,
    undo: usize,
    undo_outside: usize,
}

impl<'v> Tx<'v> {
    /// A transaction over `view` that stages its changes in `staged` (empty) and adds them to `log` (after
    /// what it holds already).
    pub(crate) fn new(view: &'v View, staged: Changes, log: wal::Record) -> Tx<'v> {
        Tx {
            view,
            staged: RefCell::new(staged),
            log: RefCell::new(log),
            undo: RefCell::default(),
            undo_outside: RefCell::default(),
        }
    }

    pub(crate) fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<'static, K, V>,
    ) -> Result<Table<'_, K, V>, StoreError> {
        Ok(Table { read: self.view.table(definition, Some(&self.staged))?, tx: self })
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark {
            log: self.log.borrow().len(),
            undo: self.undo.borrow().len(),
            undo_outside: self.undo_outside.borrow().len(),
        }
    }

    /// Runs `undo` if the write running now fails and is undone; forgets it once the write is kept.
    pub(crate) fn on_undo(&self, undo: impl FnOnce() + 'static) {
        self.undo_outside.borrow_mut().push(Box::new(undo));
    }

    /// Undoes every change since `mark`.
    pub(crate) fn roll_back(&self, mark: &Mark) {
        let mut log = self.log.borrow_mut();
        let mut staged = self.staged.borrow_mut();
        for (table, key, previous) in self.undo.borrow_mut().drain(mark.undo..).rev() {
            staged.restore(table, log.bytes(key), previous);
        }
        log.truncate(mark.log);
        let outside = self.undo_outside.borrow_mut().split_off(mark.undo_outside);
        outside.into_iter().rev().for_each(|undo| undo());
    }

    /// The staged changes, and the log record with them added.
    pub(crate) fn finish(self) -> (Changes, wal::Record) {
        (self.staged.into_inner(), self.log.into_inner())
    }

    fn change(&self, table: usize, key: &[u8], value: Option<&[u8]>) {
        let logged = self.log.borrow_mut().push(tables::ALL[table].name(), key, value);
        let previous = self.staged.borrow_mut().put(table, key, value);
        self.undo.borrow_mut().push((table, logged, previous));
    }
}

pub struct Table<'t, K: Key + 'static, V: Value + 'static> {
    read: ReadTable<'t, K, V>,
    tx: &'t Tx<'t>,
}

impl<K: Key + 'static, V: Value + 'static> Table<'_, K, V> {
    pub(crate) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), StoreError> {
        let (key, value) = (K::as_bytes(key.borrow()), V::as_bytes(value.borrow()));
        self.tx.change(self.read.id(), key.as_ref(), Some(value.as_ref()));
        Ok(())
    }

    pub(crate) fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<(), StoreError> {
        let key = K::as_bytes(key.borrow());
        self.tx.change(self.read.id(), key.as_ref(), None);
        Ok(())
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> Deref for Table<'t, K, V> {
    type Target = ReadTable<'t, K, V>;

    fn deref(&self) -> &Self::Target {
        &self.read
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::Tx;
    use crate::adapters::store::embedded::overlay::Changes;
    use crate::adapters::store::embedded::{MODEL_SWITCHES, Store, wal};

    #[test]
    fn a_rolled_back_write_leaves_what_the_batch_staged_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let view = store.view().unwrap();
        let tx = Tx::new(&view, Changes::default(), wal::Record::default());
        let switch =
            |tx: &Tx, model: &str| tx.open_table(MODEL_SWITCHES).unwrap().get(model).unwrap().map(|v| v.value());
        tx.open_table(MODEL_SWITCHES).unwrap().insert("kept", false).unwrap();
        let mark = tx.mark();
        let mut switches = tx.open_table(MODEL_SWITCHES).unwrap();
        switches.insert("kept", true).unwrap();
        switches.insert("new", true).unwrap();
        switches.remove("kept").unwrap();
        assert_eq!((switch(&tx, "kept"), switch(&tx, "new")), (None, Some(true)));
        tx.roll_back(&mark);
        assert_eq!((switch(&tx, "kept"), switch(&tx, "new")), (Some(false), None));
        // The log record holds the first change only.
        let log = mark.log;
        let (_, record) = tx.finish();
        assert_eq!(record.len(), log);
    }
}
