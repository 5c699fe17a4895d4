//! The keys break-glass proofs are made and checked with (see `cmset_core::break_glass`), derived from
//! the webhook's serving private key: every replica holds it (the shared Secret `cmset-webhook-tls`, or
//! cert-manager's), no tenant can read it. The serving certificate installs each pair it loads here;
//! the webhook signs with the newest key, the controllers accept the newest and the one before, so an
//! override signed just before a renewal still counts after it (a second renewal voids it).

use std::sync::{Arc, RwLock};

use cmset_core::break_glass::ProofKey;

/// Keys kept: the current one and the one it replaced.
const KEPT: usize = 2;

#[derive(Clone, Debug, Default)]
pub struct ProofKeys(Arc<RwLock<Vec<ProofKey>>>);

impl ProofKeys {
    /// Derives the key of `secret` (a PEM private key) and makes it the current one.
    pub fn install(&self, secret: &[u8]) {
        let key = ProofKey::derive(secret);
        let mut keys = self.0.write().unwrap_or_else(|e| e.into_inner());
        if keys.first() != Some(&key) {
            keys.retain(|k| k != &key);
            keys.insert(0, key);
            keys.truncate(KEPT);
        }
    }

    /// The key new proofs are made with; `None` before a serving key was loaded.
    pub fn current(&self) -> Option<ProofKey> {
        self.0.read().ok()?.first().cloned()
    }

    /// The keys a proof may have been made with, newest first (none: nothing verifies).
    pub fn all(&self) -> Vec<ProofKey> {
        self.0.read().map(|k| k.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_current_key_and_the_one_before() {
        let keys = ProofKeys::default();
        assert_eq!(keys.current(), None);
        keys.install(b"first");
        keys.install(b"first");
        assert_eq!(keys.all(), vec![ProofKey::derive(b"first")]);
        keys.install(b"second");
        keys.install(b"third");
        assert_eq!(keys.current(), Some(ProofKey::derive(b"third")));
        assert_eq!(
            keys.all(),
            vec![ProofKey::derive(b"third"), ProofKey::derive(b"second")]
        );
    }
}
