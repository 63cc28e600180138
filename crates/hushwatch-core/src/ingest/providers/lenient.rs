//! Reading provider JSON without building a `serde_json::Value`.
//!
//! A `Value` costs far more than the text it came from: `{"":{}}` (7 bytes) becomes a map
//! with an entry holding another map, and a 1 MiB body of nested empty objects grew about
//! 124 times once parsed, enough to abort the process under a 128 MiB limit (issue 26).
//! So every provider body is read into small typed shapes instead:
//!
//! - [`Scalar`] keeps a string and only classifies anything else; arrays and objects in its
//!   place are skipped with [`Skip`], which builds nothing (and, like a `Value`, stops at
//!   serde_json's recursion limit).
//! - [`List`] keeps at most `N` items and skips (but counts past) the rest, so no body can
//!   make more than `N` of anything exist at once; the caller decides whether an overflow
//!   refuses the request.
//! - Records declared with [`lenient_record!`] keep the keys they name, skip every other
//!   key, take the last of duplicate keys (as `serde_json::Value` did), and never fail on a
//!   wrong type: a record that is not an object reads as its `Default` with
//!   `is_object == false`. A record's problems are then judged field by field by its
//!   provider, so one odd record cannot fail the whole batch.
//!
//! What remains as a parse error is only text that is not JSON at all, or JSON nested past
//! serde_json's recursion limit of 128 (an error with a `Value` too).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// The scalar `visit_*` methods of a visitor whose value is `Default` for every shape but
/// the one it reads.
macro_rules! not_this_shape {
    ($t:ty) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$t, E> {
            Ok(<$t>::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<$t, E> {
            Ok(<$t>::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<$t, E> {
            Ok(<$t>::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$t, E> {
            Ok(<$t>::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$t, E> {
            Ok(<$t>::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$t, E> {
            Ok(<$t>::default())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$t, E> {
            Ok(<$t>::default())
        }
    };
}

/// Any JSON value, read and dropped without building anything. Unlike [`IgnoredAny`] (which
/// serde_json skips with its own loop, at any depth), each nested array or object goes
/// through `deserialize_any`, so serde_json's recursion limit of 128 applies as it did to a
/// `serde_json::Value`: a nesting bomb is an error, exactly as before, and the recursion
/// this costs is bounded by that limit.
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skip;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
                while map.next_entry::<IgnoredAny, Skip>()?.is_some() {}
                Ok(Skip)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_none<E: de::Error>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }
        }
        d.deserialize_any(V)
    }
}

/// One JSON value where a string is expected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Scalar {
    /// The key was not there.
    #[default]
    Absent,
    Null,
    Str(String),
    /// An integer that fits `i64` (Clerk-style millisecond timestamps).
    Int(i64),
    /// Any other number: a fraction, or an integer past `i64`.
    Number,
    /// Anything else: a boolean, an array, an object. Skipped, not built.
    Other,
}

impl Scalar {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Absent and `null` both mean "not set" to the providers we read.
    pub(crate) fn is_unset(&self) -> bool {
        matches!(self, Scalar::Absent | Scalar::Null)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(v))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(i64::try_from(v).map_or(Scalar::Number, Scalar::Int))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Number)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, Skip>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// At most `N` items of an array; the rest are skipped and only counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct List<T, const N: usize> {
    pub(crate) items: Vec<T>,
    /// False when the value was absent or not an array.
    pub(crate) is_array: bool,
    /// True when the array held more than `N` items.
    pub(crate) overflow: bool,
}

impl<T, const N: usize> Default for List<T, N> {
    fn default() -> Self {
        List {
            items: Vec::new(),
            is_array: false,
            overflow: false,
        }
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for List<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = List<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<T, N>, A::Error> {
                let mut list = List {
                    items: Vec::new(),
                    is_array: true,
                    overflow: false,
                };
                while list.items.len() < N {
                    match seq.next_element::<T>()? {
                        Some(item) => list.items.push(item),
                        None => return Ok(list),
                    }
                }
                while seq.next_element::<Skip>()?.is_some() {
                    list.overflow = true;
                }
                Ok(list)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<List<T, N>, A::Error> {
                while map.next_entry::<IgnoredAny, Skip>()?.is_some() {}
                Ok(List::default())
            }
            not_this_shape!(List<T, N>);
        }
        d.deserialize_any(V::<T, N>(PhantomData))
    }
}

/// Reads the named keys of one record; [`lenient_record!`] implements it.
pub(crate) trait Fields: Default {
    /// Reads the value of `key` into its field, or skips it when it is not one of ours.
    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
    fn mark_object(&mut self);
}

/// Deserializes any [`Fields`] record from any JSON value (see the module comment).
pub(crate) fn deserialize_record<'de, D: Deserializer<'de>, T: Fields>(
    d: D,
) -> Result<T, D::Error> {
    struct V<T>(PhantomData<T>);
    impl<'de, T: Fields> Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let mut out = T::default();
            out.mark_object();
            while let Some(key) = map.next_key::<Key>()? {
                out.read(&key.0, &mut map)?;
            }
            Ok(out)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(T::default())
        }
        not_this_shape!(T);
    }
    d.deserialize_any(V::<T>(PhantomData))
}

/// A key, kept only when short enough to be one of ours: a long key is skipped without
/// being copied (no field name we read is longer than 64 bytes).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(if v.len() <= 64 {
                    v.to_owned()
                } else {
                    String::new()
                }))
            }
        }
        d.deserialize_str(V)
    }
}

/// Declares a record read by key: `lenient_record!(Name { "jsonKey" => field: Type, … })`.
/// Every field type must be `Deserialize + Default` and never fail on a wrong shape
/// ([`Scalar`], [`List`], or another lenient record).
macro_rules! lenient_record {
    ($name:ident { $($key:literal => $field:ident : $ty:ty),* $(,)? }) => {
        #[derive(Debug, Default)]
        pub(crate) struct $name {
            /// False when the value was absent or not a JSON object.
            #[allow(dead_code)]
            pub(crate) is_object: bool,
            $(pub(crate) $field: $ty,)*
        }
        impl $crate::ingest::providers::lenient::Fields for $name {
            fn read<'de, A: serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                match key {
                    $($key => self.$field = map.next_value()?,)*
                    _ => {
                        map.next_value::<$crate::ingest::providers::lenient::Skip>()?;
                    }
                }
                Ok(())
            }
            fn mark_object(&mut self) {
                self.is_object = true;
            }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::ingest::providers::lenient::deserialize_record(d)
            }
        }
    };
}
pub(crate) use lenient_record;

#[cfg(test)]
mod tests {
    use super::*;

    lenient_record!(Probe {
        "a" => a: Scalar,
        "list" => list: List<Scalar, 2>,
        "inner" => inner: Inner,
    });
    lenient_record!(Inner { "id" => id: Scalar });

    #[test]
    fn wrong_shapes_read_as_defaults_not_errors() {
        let p: Probe = serde_json::from_str(r#"{"a":[1,{"x":2}],"list":"no","inner":5}"#).unwrap();
        assert!(p.is_object);
        assert_eq!(p.a, Scalar::Other);
        assert!(!p.list.is_array);
        assert!(!p.inner.is_object);
        let p: Probe = serde_json::from_str("[1,2]").unwrap();
        assert!(!p.is_object);
    }

    #[test]
    fn lists_keep_n_and_count_past_it_and_duplicates_take_the_last() {
        let p: Probe = serde_json::from_str(
            r#"{"a":"first","a":"second","list":["x","y",{},{}],"inner":{"id":"i","junk":{}}}"#,
        )
        .unwrap();
        assert_eq!(p.a.as_str(), Some("second"));
        assert_eq!(p.list.items.len(), 2);
        assert!(p.list.overflow);
        assert_eq!(p.inner.id.as_str(), Some("i"));
        assert_eq!(
            serde_json::from_str::<Scalar>("12").unwrap(),
            Scalar::Int(12)
        );
        assert_eq!(
            serde_json::from_str::<Scalar>("null").unwrap(),
            Scalar::Null
        );
    }

    #[test]
    fn deep_nesting_is_an_error_as_with_a_json_tree() {
        for deep in [
            format!(r#"{{"a":{}{}}}"#, "[".repeat(200_000), "]".repeat(200_000)),
            format!(r#"{{"zz":{}{}}}"#, "[".repeat(200_000), "]".repeat(200_000)),
            format!(
                r#"{{"list":[{}1{}]}}"#,
                r#"{"x":"#.repeat(100_000),
                "}".repeat(100_000)
            ),
        ] {
            assert!(serde_json::from_str::<Probe>(&deep).is_err());
        }
        // Within the limit, skipped values may nest.
        let p: Probe = serde_json::from_str(r#"{"zz":[[[{"a":[1]}]]],"a":"kept"}"#).unwrap();
        assert_eq!(p.a.as_str(), Some("kept"));
    }
}
