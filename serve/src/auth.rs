//! Bearer tokens, read from the environment once at start: read-only and read-write, for every
//! index or for one. Tokens are kept as SHA-256 digests and never printed.
//!
//! `FLEXSTRUCT_SERVE_READ_TOKENS` and `FLEXSTRUCT_SERVE_WRITE_TOKENS` hold comma-separated
//! entries: `TOKEN` is valid for every index, `TOKEN@INDEX` for that index only (an entry whose
//! part after its last `@` names no served index is a token as a whole). A write token may read. With no token set at all, every request is allowed (the server then
//! refuses to listen beyond loopback unless told to).

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// What a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Ask, retrieve, read documents and the graph.
    Read,
    /// Add and delete documents, reload an index.
    Write,
}

type Token = [u8; 32];

fn digest(token: &str) -> Token {
    Sha256::digest(token.as_bytes()).into()
}

/// The tokens the server accepts.
#[derive(Debug, Default, Clone)]
pub struct Tokens {
    /// Tokens for every index, with what they allow.
    global: HashMap<Token, Access>,
    /// Tokens for one index.
    per_index: HashMap<String, HashMap<Token, Access>>,
}

const READ: &str = "FLEXSTRUCT_SERVE_READ_TOKENS";
const WRITE: &str = "FLEXSTRUCT_SERVE_WRITE_TOKENS";

impl Tokens {
    /// The tokens of the environment `env` (a variable's value by name) for the served indexes.
    pub fn from_env(indexes: &[&str], env: impl Fn(&str) -> Option<String>) -> Tokens {
        let mut tokens = Tokens::default();
        for (var, access) in [(READ, Access::Read), (WRITE, Access::Write)] {
            let value = env(var).unwrap_or_default();
            for entry in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                let (token, index) = match entry.rsplit_once('@') {
                    Some((token, index)) if indexes.contains(&index) && !token.is_empty() => (token, Some(index)),
                    _ => (entry, None),
                };
                let into = match index {
                    Some(index) => tokens.per_index.entry(index.to_owned()).or_default(),
                    None => &mut tokens.global,
                };
                let granted = into.entry(digest(token)).or_insert(access);
                *granted = (*granted).max(access);
            }
        }
        tokens
    }

    /// Whether any token is set (otherwise every request is allowed).
    pub fn enabled(&self) -> bool {
        !self.global.is_empty() || !self.per_index.is_empty()
    }

    /// Whether the `Authorization` header `header` allows `access` to `index` (to every index
    /// the token may read, for `None`).
    pub fn check(&self, header: Option<&str>, index: Option<&str>, access: Access) -> Result<(), ApiError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(token) = header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim).filter(|t| !t.is_empty())
        else {
            return Err(ApiError::unauthorized("this server wants a bearer token (Authorization: Bearer <token>)"));
        };
        let token = digest(token);
        let granted = match index {
            Some(index) => self.access(&token, index),
            None => std::iter::once(self.global.get(&token).copied())
                .chain(self.per_index.values().map(|t| t.get(&token).copied()))
                .flatten()
                .max(),
        };
        match granted {
            Some(granted) if granted >= access => Ok(()),
            Some(_) => Err(ApiError::forbidden("this token may only read")),
            None if self.known(&token) => {
                Err(ApiError::forbidden(format!("this token is not valid for index `{}`", index.unwrap_or_default())))
            }
            None => Err(ApiError::unauthorized("the bearer token is not valid")),
        }
    }

    /// What the token (as the header gives it) may do with `index`; everything without tokens.
    pub fn allows(&self, header: Option<&str>, index: &str) -> bool {
        self.check(header, Some(index), Access::Read).is_ok()
    }

    fn access(&self, token: &Token, index: &str) -> Option<Access> {
        let own = self.per_index.get(index).and_then(|t| t.get(token)).copied();
        own.max(self.global.get(token).copied())
    }

    fn known(&self, token: &Token) -> bool {
        self.global.contains_key(token) || self.per_index.values().any(|t| t.contains_key(token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(vars: &[(&str, &str)]) -> Tokens {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Tokens::from_env(&["sample", "my-docs"], |k| vars.get(k).cloned())
    }

    #[test]
    fn no_tokens_allow_everything() {
        let t = tokens(&[]);
        assert!(!t.enabled());
        assert!(t.check(None, Some("sample"), Access::Write).is_ok());
    }

    #[test]
    fn an_at_sign_names_an_index_only_when_it_is_served() {
        let t = tokens(&[(READ, "odd@mail@other")]);
        assert!(t.check(Some("Bearer odd@mail@other"), Some("sample"), Access::Read).is_ok());
        assert!(t.check(Some("Bearer odd@mail"), Some("sample"), Access::Read).is_err());
    }

    #[test]
    fn tokens_allow_what_they_were_given_for() {
        let t = tokens(&[(READ, "r1, r2,look@sample, odd@mail@other"), (WRITE, "w,mine@my-docs")]);
        let ok = |h: &str, i: Option<&str>, a| t.check(Some(h), i, a).is_ok();
        let status = |h: Option<&str>, i, a| t.check(h, Some(i), a).unwrap_err().status.as_u16();
        assert!(ok("Bearer r2", Some("sample"), Access::Read));
        assert_eq!(status(Some("Bearer r1"), "sample", Access::Write), 403);
        assert!(ok("Bearer w", Some("my-docs"), Access::Write));
        assert!(ok("Bearer mine", Some("my-docs"), Access::Write));
        assert_eq!(status(Some("Bearer mine"), "sample", Access::Read), 403);
        assert!(ok("Bearer look", Some("sample"), Access::Read));
        assert_eq!(status(Some("Bearer look"), "sample", Access::Write), 403);
        assert_eq!(status(None, "sample", Access::Read), 401);
        assert_eq!(status(Some("Bearer nope"), "sample", Access::Read), 401);
        assert_eq!(status(Some("Basic r1"), "sample", Access::Read), 401);
        // Without an index: any index the token may read.
        assert!(ok("Bearer mine", None, Access::Read));
        assert!(t.allows(Some("Bearer mine"), "my-docs") && !t.allows(Some("Bearer mine"), "sample"));
        // Nothing of a token is in what the tokens print.
        assert!(!format!("{t:?}").contains("mine"));
    }
}
