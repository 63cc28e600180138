//! Walking the chain: recompute every hash, check every link, and compare
//! with the checkpoints. Streams over entries (an iterator), so memory does
//! not grow with the log.

use super::chain::{to_hex, Entry, GENESIS};
use super::checkpoint::Checkpoint;
use std::fmt;

/// Where the chain starts: genesis, or the last entry pruned by retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub seq: i64,
    pub hash: [u8; 32],
}

impl Anchor {
    pub const GENESIS: Anchor = Anchor {
        seq: 0,
        hash: GENESIS,
    };
}

/// An entry as stored: its fields plus the hash that was stored with it.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    pub entry: Entry,
    pub stored_hash: [u8; 32],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub entries: u64,
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    pub first_received_ms: Option<i64>,
    pub last_received_ms: Option<i64>,
    pub head_hash: [u8; 32],
    pub last_checkpoint: Option<Checkpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The first sequence number that is wrong or missing.
    pub seq: i64,
    pub reason: String,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "audit log broken at seq {}: {}", self.seq, self.reason)
    }
}

/// Verifies `entries` (in ascending seq order) against `anchor` and
/// `checkpoints` (any order).
pub fn verify(
    anchor: Anchor,
    entries: impl Iterator<Item = StoredEntry>,
    checkpoints: &[Checkpoint],
    key: Option<&[u8]>,
) -> Result<Summary, Broken> {
    let mut walker = ChainWalker::new(anchor, checkpoints, key)?;
    for e in entries {
        walker.push(&e)?;
    }
    walker.finish()
}

/// Push-style verification, one entry at a time, so a database cursor can
/// feed it without collecting the log in memory.
pub struct ChainWalker {
    checkpoints: std::vec::IntoIter<Checkpoint>,
    next_checkpoint: Option<Checkpoint>,
    expected_seq: i64,
    prev: [u8; 32],
    summary: Summary,
}

impl ChainWalker {
    pub fn new(
        anchor: Anchor,
        checkpoints: &[Checkpoint],
        key: Option<&[u8]>,
    ) -> Result<ChainWalker, Broken> {
        let mut relevant: Vec<Checkpoint> = checkpoints
            .iter()
            .filter(|c| c.seq > anchor.seq)
            .cloned()
            .collect();
        relevant.sort_by_key(|c| c.seq);
        if let Some(c) = relevant.iter().find(|c| !c.signature_ok(key)) {
            return Err(Broken {
                seq: c.seq,
                reason:
                    "checkpoint signature does not verify (wrong key, or the checkpoint was edited)"
                        .into(),
            });
        }
        let mut checkpoints = relevant.into_iter();
        Ok(ChainWalker {
            next_checkpoint: checkpoints.next(),
            checkpoints,
            expected_seq: anchor.seq + 1,
            prev: anchor.hash,
            summary: Summary {
                entries: 0,
                first_seq: None,
                last_seq: None,
                first_received_ms: None,
                last_received_ms: None,
                head_hash: anchor.hash,
                last_checkpoint: None,
            },
        })
    }

    pub fn push(&mut self, stored: &StoredEntry) -> Result<(), Broken> {
        let e = &stored.entry;
        if e.seq != self.expected_seq {
            let reason = if e.seq > self.expected_seq {
                "entry missing (deleted)"
            } else {
                "sequence out of order"
            };
            return Err(Broken {
                seq: self.expected_seq,
                reason: reason.into(),
            });
        }
        if e.prev_hash != self.prev {
            return Err(Broken {
                seq: e.seq,
                reason:
                    "does not link to the previous entry (an earlier entry was altered or removed)"
                        .into(),
            });
        }
        let hash = e.hash();
        if hash != stored.stored_hash {
            return Err(Broken {
                seq: e.seq,
                reason: "contents were altered after it was written".into(),
            });
        }
        while let Some(c) = self.next_checkpoint.take_if(|c| c.seq <= e.seq) {
            if c.seq == e.seq && c.hash != hash {
                return Err(Broken {
                    seq: e.seq,
                    reason: format!("differs from the checkpoint taken at {}", c.created_at_ms),
                });
            }
            self.summary.last_checkpoint = Some(c);
            self.next_checkpoint = self.checkpoints.next();
        }
        let s = &mut self.summary;
        s.entries += 1;
        s.first_seq.get_or_insert(e.seq);
        s.first_received_ms.get_or_insert(e.received_at_ms);
        s.last_seq = Some(e.seq);
        s.last_received_ms = Some(e.received_at_ms);
        self.prev = hash;
        self.expected_seq += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Result<Summary, Broken> {
        if let Some(c) = self.next_checkpoint {
            return Err(Broken {
                seq: self.expected_seq,
                reason: format!(
                    "log ends at seq {} but a checkpoint covers seq {} (hash {}): the tail was truncated",
                    self.expected_seq - 1,
                    c.seq,
                    to_hex(&c.hash)
                ),
            });
        }
        self.summary.head_hash = self.prev;
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::sample;

    fn chain(n: i64) -> Vec<StoredEntry> {
        let mut prev = GENESIS;
        (1..=n)
            .map(|seq| {
                let entry = sample(seq, prev);
                prev = entry.hash();
                StoredEntry {
                    stored_hash: prev,
                    entry,
                }
            })
            .collect()
    }

    const KEY: &[u8] = b"k";

    fn checkpoint_at(entries: &[StoredEntry], seq: i64) -> Checkpoint {
        Checkpoint::new(seq, entries[(seq - 1) as usize].stored_hash, 1, Some(KEY))
    }

    #[test]
    fn intact_chain_verifies() {
        let entries = chain(50);
        let cps = [checkpoint_at(&entries, 20), checkpoint_at(&entries, 50)];
        let s = verify(Anchor::GENESIS, entries.into_iter(), &cps, Some(KEY)).unwrap();
        assert_eq!(s.entries, 50);
        assert_eq!(s.last_checkpoint.unwrap().seq, 50);
    }

    #[test]
    fn altered_field_is_named() {
        let mut entries = chain(10);
        entries[4].entry.event_type = "user.created".into();
        let err = verify(Anchor::GENESIS, entries.into_iter(), &[], None).unwrap_err();
        assert_eq!(err.seq, 5);
    }

    #[test]
    fn rewritten_hash_breaks_the_next_link() {
        let mut entries = chain(10);
        entries[4].entry.event_type = "user.created".into();
        entries[4].stored_hash = entries[4].entry.hash();
        let err = verify(Anchor::GENESIS, entries.into_iter(), &[], None).unwrap_err();
        assert_eq!(err.seq, 6);
    }

    #[test]
    fn deleted_entry_is_named() {
        let mut entries = chain(10);
        entries.remove(6);
        let err = verify(Anchor::GENESIS, entries.into_iter(), &[], None).unwrap_err();
        assert_eq!(err.seq, 7);
    }

    #[test]
    fn truncation_past_a_checkpoint_is_detected() {
        let entries = chain(10);
        let cps = [checkpoint_at(&entries, 9)];
        let err = verify(
            Anchor::GENESIS,
            entries.into_iter().take(7),
            &cps,
            Some(KEY),
        )
        .unwrap_err();
        assert_eq!(err.seq, 8);
        assert!(err.reason.contains("truncated"));
    }

    #[test]
    fn forged_checkpoint_is_detected() {
        let entries = chain(5);
        let mut cp = checkpoint_at(&entries, 5);
        cp.seq = 4;
        assert!(verify(Anchor::GENESIS, entries.into_iter(), &[cp], Some(KEY)).is_err());
    }

    #[test]
    fn pruned_prefix_verifies_from_its_anchor() {
        let entries = chain(10);
        let anchor = Anchor {
            seq: 4,
            hash: entries[3].stored_hash,
        };
        let s = verify(anchor, entries.into_iter().skip(4), &[], None).unwrap();
        assert_eq!((s.entries, s.first_seq), (6, Some(5)));
    }
}
