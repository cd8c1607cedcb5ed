//! A write the writer runs: applied in a batch, then told its outcome once it is published or durable.

use super::tx::Tx;
use super::{Commit, StoreError};

pub(super) trait Job: Send {
    fn commit(&self) -> Commit;
    /// The writer's last write: see `Writer::close`.
    fn closes(&self) -> bool {
        false
    }
    fn run(&mut self, tx: &Tx) -> Result<(), StoreError>;
    fn deliver(self: Box<Self>, outcome: Result<(), StoreError>);
}
