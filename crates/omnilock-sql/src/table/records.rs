//! Records: one row per name in `<table>_records`, apart from the locks,
//! written with the time the database keeps it (`expires_at`, by its own
//! clock). Every mode keeps them here (advisory mode through the
//! [`TableStore`] it holds).

use std::time::Duration;

use omnilock_core::{Error, LockName, Record, Result};
use sqlx::Row;

use super::TableStore;
use crate::conn::errors::is_missing_table;
use crate::conn::{query, with_pool};
use crate::queries::{Args, records_name};

impl TableStore {
    /// Writes the record `name`, replacing any earlier one, for the
    /// database to keep `keep` ([`omnilock_core::Backend::write_record`]).
    pub(crate) async fn set_record(
        &self,
        name: &LockName,
        value: &str,
        keep: Duration,
    ) -> Result<()> {
        let args = Args {
            name: name.as_str(),
            value,
            keep_ms: keep.as_millis() as i64,
            ..Args::default()
        };
        let err = |e| self.record_err(e);
        with_pool!(self.pool(), p => {
            query(&self.queries().records.write, &args).execute(p).await.map_err(err)?;
        });
        Ok(())
    }

    /// The live record `name` and the time the database keeps it yet
    /// ([`omnilock_core::Backend::read_record`]).
    pub(crate) async fn get_record(&self, name: &LockName) -> Result<Option<Record>> {
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.record_err(e);
        let row: Option<(String, i64)> = with_pool!(self.pool(), p => {
            match query(&self.queries().records.read, &args).fetch_optional(p).await.map_err(err)? {
                Some(row) => Some((row.try_get(0).map_err(err)?, row.try_get(1).map_err(err)?)),
                None => None,
            }
        });
        Ok(row.map(|(value, left_ms)| {
            Record::new(value, Some(Duration::from_millis(left_ms.max(1) as u64)))
        }))
    }

    /// Deletes the live record `name`; whether there was one
    /// ([`omnilock_core::Backend::delete_record`]).
    pub(crate) async fn del_record(&self, name: &LockName) -> Result<bool> {
        let args = Args {
            name: name.as_str(),
            ..Args::default()
        };
        let err = |e| self.record_err(e);
        let deleted = with_pool!(self.pool(), p => {
            query(&self.queries().records.delete, &args)
                .execute(p)
                .await
                .map_err(err)?
                .rows_affected()
        });
        Ok(deleted > 0)
    }

    /// As [`TableStore::err`], naming the record table when it is missing
    /// (tables a DBA created before records existed, `create_table=false`).
    fn record_err(&self, e: sqlx::Error) -> Error {
        let config = self.config();
        if is_missing_table(&e, config.dialect) {
            return Error::config(format!(
                "the record table {} does not exist (create it, or allow create_table)",
                records_name(&config.table)
            ))
            .with_backend(config.dialect.kind())
            .with_cause(e);
        }
        self.err(e)
    }
}
