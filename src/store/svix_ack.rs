//! Acknowledging lost Svix messages together with its audit entry, in one
//! transaction: an acknowledgement can resolve a critical alert, so who
//! resolved it is on the tamper-evident record exactly when it happened.

use super::{audit, svix, NewEvent, Store, StoreError};

impl Store {
    /// `svix_acknowledge`; `entry` is appended to the audit log when at
    /// least one message was acknowledged (an acknowledgement that changed
    /// nothing is not an action).
    pub async fn svix_acknowledge_audited(
        &self,
        apply: svix::SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        entry: Option<NewEvent>,
    ) -> Result<(usize, u64, Vec<svix::SvixPage>), StoreError> {
        self.call(move |c| {
            let (acked, lost, pages) = svix::acknowledge(c, &apply, &endpoint_id, &msg_ids)?;
            if let (true, Some(entry)) = (acked > 0, &entry) {
                audit::append(c, entry)?;
            }
            Ok((acked, lost, pages))
        })
        .await
    }
}
