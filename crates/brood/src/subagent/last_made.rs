//! The last value of a kind made, shared. Siblings of one `task` are made alike —
//! the same system prompt, the same grant — and each waiting child of a
//! 1,000-child tree held copies of its own (BENCHMARKS.md section 9, the sixth and
//! seventh rounds). A value equal to the last one made is handed out as that one's
//! `Arc`; a different one becomes the new last. Equal means equal in every field
//! (`PartialEq`), so sharing never changes what a run holds: a grant shared
//! between siblings is one they were each granted in full.

use std::borrow::Borrow;
use std::sync::{Arc, Mutex};

/// The last value made of a kind (see the module).
pub(crate) struct LastMade<T: ?Sized>(Mutex<Option<Arc<T>>>);

impl<T: ?Sized> Default for LastMade<T> {
    fn default() -> Self {
        LastMade(Mutex::new(None))
    }
}

impl<T: ?Sized + PartialEq> LastMade<T> {
    /// `value` as an `Arc`: the last one made when they are equal, else a new one
    /// that becomes the last.
    pub(crate) fn share<V>(&self, value: V) -> Arc<T>
    where
        V: Borrow<T>,
        Arc<T>: From<V>,
    {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &*last {
            Some(l) if **l == *value.borrow() => l.clone(),
            _ => {
                let made = Arc::<T>::from(value);
                *last = Some(made.clone());
                made
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LastMade;
    use crate::tool::Permissions;
    use std::sync::Arc;

    #[test]
    fn equal_values_share_the_last_one_and_any_difference_makes_a_new_one() {
        let last = LastMade::<Permissions>::default();
        let a = last.share(Permissions::full("general"));
        let b = last.share(Permissions::full("general"));
        assert!(Arc::ptr_eq(&a, &b), "an equal grant is the last one's");
        // One field apart (here the network ceiling; any other field likewise) is not shared.
        let mut narrower = Permissions::full("general");
        narrower.network = false;
        let c = last.share(narrower.clone());
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*c, narrower);
        assert!(a.network, "the first grant is untouched by the next");
        let d = last.share(Permissions::full("general"));
        assert!(!Arc::ptr_eq(&c, &d) && *d == Permissions::full("general"));
        let texts = LastMade::<str>::default();
        let x = texts.share("one".to_string());
        assert!(Arc::ptr_eq(&x, &texts.share("one".to_string())));
        assert_eq!(&*texts.share("two".to_string()), "two");
    }
}
