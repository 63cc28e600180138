//! Acknowledging lost Svix messages together with its audit entry, in one
//! transaction (`Backend::svix_acknowledge_audited`): an acknowledgement can
//! resolve a critical alert, so who resolved it is on the tamper-evident
//! record exactly when it happened.

use super::audit;
use super::db::Db;
use super::svix::{self, SvixApply, SvixPage};
use super::{NewEvent, StoreError};

/// `svix::acknowledge`, then `entry` appended when anything was
/// acknowledged, on either engine (`store::db`). The audit head is locked
/// first (PostgreSQL), as every appending transaction takes it: before the
/// endpoint row `acknowledge` locks.
pub(super) async fn acknowledge_audited<D: Db>(
    db: &D,
    apply: &SvixApply,
    endpoint_id: &str,
    msg_ids: &[String],
    entry: Option<&NewEvent>,
) -> Result<(usize, u64, Vec<SvixPage>), StoreError> {
    audit::lock_head(db, entry.is_some_and(|e| e.audit)).await?;
    let (acked, lost, pages) = svix::acknowledge(db, apply, endpoint_id, msg_ids).await?;
    if let (true, Some(entry)) = (acked > 0, entry) {
        audit::append_audit(db, entry).await?;
    }
    Ok((acked, lost, pages))
}
