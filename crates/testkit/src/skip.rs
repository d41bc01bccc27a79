//! Declared skips. A test whose prerequisite is missing (a tool not installed, no IPv6, not
//! root) says so and stops, instead of returning early in silence and passing; under CI
//! (`CI=true`), where `make deps` installs everything, the same skip fails the test.
//!
//! ```no_run
//! # fn t() {
//! testkit::require_tool!("/usr/bin/memcaslap");
//! testkit::skip_unless!(std::net::UdpSocket::bind("[::1]:0").is_ok(), "no IPv6 loopback");
//! # }
//! ```
//!
//! The message goes straight to the process's stderr (`SKIP <test>: <why>`), so it shows in
//! `cargo test`'s output although the harness captures what tests print.

use std::fmt::Display;
use std::io::Write;
use std::path::Path;

/// True when a skip must fail the test: under CI (`CI` set to `true` or `1`) or when
/// `INKCACHE_REQUIRE_TOOLS=1` asks for it.
pub fn skips_fail() -> bool {
    let set = |v: &str| {
        std::env::var(v)
            .map(|s| matches!(s.trim(), "1" | "true" | "TRUE" | "yes"))
            .unwrap_or(false)
    };
    set("CI") || set("INKCACHE_REQUIRE_TOOLS")
}

/// Declares that the running test is skipped for `why`: prints `SKIP <test>: <why>` on stderr,
/// or panics under CI (see [`skips_fail`]). The caller returns right after (the macros
/// [`skip_unless!`](crate::skip_unless) and [`require_tool!`](crate::require_tool) do).
#[track_caller]
pub fn skip(why: impl Display) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string();
    if skips_fail() {
        panic!("{test} cannot run: {why} (skips fail under CI=true or INKCACHE_REQUIRE_TOOLS=1)");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {why}");
}

/// True if the tool at `path` exists; otherwise nothing to do.
pub fn have_tool(path: impl AsRef<Path>) -> bool {
    path.as_ref().exists()
}

/// True if the tool at `path` exists; otherwise declares the skip ([`skip`]: a failure under
/// CI), and the test returns or leaves out what needs the tool.
#[track_caller]
pub fn tool_or_skip(path: impl AsRef<Path>) -> bool {
    let path = path.as_ref();
    if have_tool(path) {
        return true;
    }
    skip(format!(
        "{} is not installed (make deps installs it)",
        path.display()
    ));
    false
}

/// What a test returns when it skips: `()` or `Ok(Default::default())`.
pub trait Skipped {
    fn skipped() -> Self;
}

impl Skipped for () {
    fn skipped() -> Self {}
}

impl<T: Default, E> Skipped for Result<T, E> {
    fn skipped() -> Self {
        Ok(T::default())
    }
}

/// `skip_unless!(condition, "why {}", args...)`: when the condition is false, declares the skip
/// ([`skip`]) and returns from the test (`()` or `Ok(())`).
#[macro_export]
macro_rules! skip_unless {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            $crate::skip(format!($($why)+));
            return $crate::Skipped::skipped();
        }
    };
}

/// `require_tool!("/usr/bin/memcaslap")`: skips the test ([`tool_or_skip`], returning as
/// [`skip_unless!`] does) unless the tool is installed.
#[macro_export]
macro_rules! require_tool {
    ($path:expr) => {
        if !$crate::tool_or_skip($path) {
            return $crate::Skipped::skipped();
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(have: bool) -> Result<u32, String> {
        crate::skip_unless!(have, "nothing");
        Err("ran".into())
    }

    #[test]
    fn a_skip_returns_from_the_test_or_fails_under_ci() {
        assert_eq!(probe(true), Err("ran".into()));
        if skips_fail() {
            assert!(std::panic::catch_unwind(|| probe(false)).is_err());
        } else {
            assert_eq!(probe(false), Ok(0));
        }
    }

    #[test]
    fn a_missing_tool_is_a_skip_or_fails_under_ci() {
        assert!(tool_or_skip("/"));
        let missing = "/nonexistent/inkcache-test-tool";
        if skips_fail() {
            assert!(std::panic::catch_unwind(|| tool_or_skip(missing)).is_err());
        } else {
            assert!(!tool_or_skip(missing));
        }
    }
}
