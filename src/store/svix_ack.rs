//! Acknowledging lost Svix messages together with its audit entry, in one
//! transaction (`Backend::svix_acknowledge_audited`): an acknowledgement can
//! resolve a critical alert, so who resolved it is on the tamper-evident
//! record exactly when it happened.

use super::svix::{SvixApply, SvixPage};
use super::{NewEvent, Store, StoreError};

impl Store {
    /// `svix_acknowledge`; `entry` is appended to the audit log when at
    /// least one message was acknowledged (an acknowledgement that changed
    /// nothing is not an action).
    pub async fn svix_acknowledge_audited(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        entry: Option<NewEvent>,
    ) -> Result<(usize, u64, Vec<SvixPage>), StoreError> {
        self.backend
            .svix_acknowledge_audited(apply, endpoint_id, msg_ids, entry)
            .await
    }
}
