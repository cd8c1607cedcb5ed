//! The audit trail and the named operators. An entry goes into the write whose change it records
//! ([`append`]); nothing removes one.

use super::tables::{AUDIT, AUDIT_SEQ, OPERATORS, SEQUENCES};
use super::{Refusal, Store, StoreError, Tx, blocking, decode, encode};
use crate::domain::audit::{Action, Actor, AuditEntry, AuditFilter, Change, OperatorRecord};
use crate::domain::clock::now_ms;
use crate::ports::storage::AuditTrail;

/// Appends `change` to the trail, in `tx`.
pub(crate) fn append(tx: &Tx, change: Change) -> Result<(), StoreError> {
    let mut sequences = tx.open_table(SEQUENCES)?;
    let seq = sequences.get(AUDIT_SEQ)?.map_or(0, |last| last.value()) + 1;
    sequences.insert(AUDIT_SEQ, seq)?;
    let entry = change.entry(seq, now_ms());
    tx.open_table(AUDIT)?.insert(seq, encode(&entry)?.as_slice())?;
    Ok(())
}

#[async_trait::async_trait]
impl AuditTrail for Store {
    async fn add_operator(&self, record: OperatorRecord, by: &Actor) -> Result<(), StoreError> {
        let by = by.clone();
        blocking(self, move |store| {
            store.write(move |tx| {
                let mut operators = tx.open_table(OPERATORS)?;
                if operators.get(record.name.as_str())?.is_some() {
                    let message = format!("The operator name `{}` is taken: names are never reused.", record.name);
                    return Err(StoreError::refused(Refusal::Conflict, message));
                }
                operators.insert(record.name.as_str(), encode(&record)?.as_slice())?;
                let change = Change::new(&by, Action::OperatorCreate, None).target(&record.name);
                append(tx, change.values(serde_json::Value::Null, record.shown()))
            })
        })
        .await
    }

    async fn revoke_operator(&self, name: &str, now_ms: i64, by: &Actor) -> Result<Option<OperatorRecord>, StoreError> {
        let (name, by) = (name.to_string(), by.clone());
        blocking(self, move |store| {
            store.write(move |tx| {
                let mut operators = tx.open_table(OPERATORS)?;
                let Some(mut record) =
                    operators.get(name.as_str())?.map(|v| decode::<OperatorRecord>(v.value())).transpose()?
                else {
                    return Ok(None);
                };
                if !record.live() {
                    return Ok(None);
                }
                let before = record.shown();
                record.revoked_at_ms = Some(now_ms);
                operators.insert(name.as_str(), encode(&record)?.as_slice())?;
                append(
                    tx,
                    Change::new(&by, Action::OperatorRevoke, None).target(&name).values(before, record.shown()),
                )?;
                Ok(Some(record))
            })
        })
        .await
    }

    async fn operators(&self) -> Result<Vec<OperatorRecord>, StoreError> {
        let view = self.view()?;
        view.open_table(OPERATORS)?.iter()?.map(|row| decode(row?.1.value())).collect()
    }

    async fn operator_by_token(&self, token_hash: &str) -> Result<Option<OperatorRecord>, StoreError> {
        // A handful of operators: read them all rather than keep an index by hash.
        Ok(self.operators().await?.into_iter().find(|o| o.token_hash == token_hash))
    }

    async fn audit_entries(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        let view = self.view()?;
        let mut kept = Vec::new();
        for row in view.open_table(AUDIT)?.iter()? {
            let entry: AuditEntry = decode(row?.1.value())?;
            if filter.keeps(&entry) {
                kept.push(entry);
                if kept.len() == filter.limit {
                    break;
                }
            }
        }
        Ok(kept)
    }
}
