//! Byte-for-byte comparison with stock memcached: the same request scripts, each on a fresh
//! connection with its own keys, must get the same answers (CAS values aside).

mod common;
use common::*;
use std::time::Duration;

/// Scripts whose answers must match memcached exactly. `{}` is replaced by a per-script prefix.
const SCRIPTS: &[&str] = &[
    "set {}k 0 0 1\r\na\r\nget {}k\r\n",
    "set {}k 5 0 3 noreply\r\nabc\r\nget {}k {}miss {}k\r\n",
    "set {}k 4294967295 0 1\r\nb\r\nget {}k\r\n",
    "set {}k 4294967296 0 1\r\nb\r\nget {}k\r\n",
    "set {}k 0 0 -1\r\nabc\r\nget {}k\r\n",
    "set {}k abc 0 1\r\nb\r\n",
    "set {}k 0 0 3\r\nabcde\r\nget {}k\r\n",
    "set {}k 0 0 1\r\nb\n\nget {}k\n",
    "set {}k 0 0 1\r\nbxx\r\nget {}k\n",
    "set {}k 0 0 1\nb\r\nget {}k\n",
    "set {}k 0 0 1 noreply extra\r\n",
    "set {}k\r\n",
    "get\r\n",
    "gets\r\n",
    "\r\n",
    "bogus command\r\n",
    "GET {}k\r\n",
    "m\r\n",
    "add {}k 0 0 1\r\na\r\nadd {}k 0 0 1\r\nb\r\nget {}k\r\n",
    "replace {}k 0 0 1\r\na\r\nset {}k 0 0 1\r\na\r\nreplace {}k 1 0 1\r\nb\r\nget {}k\r\n",
    "append {}k 0 0 1\r\na\r\nset {}k 3 0 1\r\na\r\nappend {}k 0 0 2\r\nbc\r\nprepend {}k 0 0 1\r\nz\r\nget {}k\r\n",
    "cas {}k 0 0 1 1\r\na\r\ncas {}k 0 0 1\r\na\r\ncas {}k 0 0 1 x\r\na\r\n",
    "set {}k 0 0 1\r\na\r\ncas {}k 0 0 1 999999999\r\nb\r\nget {}k\r\n",
    "incr {}n 1\r\nset {}n 0 0 2\r\n10\r\nincr {}n 5\r\ndecr {}n 100\r\nget {}n\r\n",
    "set {}n 0 0 2 noreply\r\n10\r\ndecr {}n 1\r\nget {}n\r\nincr {}n 18446744073709551615\r\nincr {}n x\r\n",
    "set {}n 0 0 3\r\nabc\r\nincr {}n 1\r\nincr {}n -1\r\ndecr {}n 1 noreply\r\nget {}n\r\n",
    "set {}n 0 0 20\r\n18446744073709551615\r\nincr {}n 2\r\nget {}n\r\n",
    "delete {}k\r\nset {}k 0 0 1\r\na\r\ndelete {}k\r\ndelete {}k\r\n",
    "delete {}k 1\r\ndelete {}k 0\r\ndelete {}k 0 noreply\r\ndelete {}k noreply\r\ndelete {}k 0 x\r\n",
    "touch {}k 10\r\nset {}k 0 0 1\r\na\r\ntouch {}k 10\r\ntouch {}k x\r\ntouch {}k\r\n",
    "set {}k 0 0 1\r\na\r\ngat 100 {}k {}miss\r\ngat x {}k\r\ngat 100\r\n",
    "set {}k 0 -1 1\r\na\r\nget {}k\r\nset {}k 0 1000 1\r\na\r\nget {}k\r\n",
    "verbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity 1 2 3\r\n",
    "stats foo\r\n",
    "incr\r\ndecr {}k\r\ntouch\r\ndelete\r\n",
    "mn\r\nmx\r\n",
    "ms {}m 2 T0 F5\r\nhi\r\nmg {}m v f s k\r\nmg {}miss v\r\nmg {}miss v q\r\nmn\r\n",
    "ms {}m 2 I\r\nab\r\nms {}m S2\r\nab\r\nms {}m 2 MA\r\ncd\r\nmg {}m v\r\nms {}m 2 MX\r\nab\r\n",
    "md {}m\r\nms {}m 1\r\nx\r\nmd {}m q\r\nmd {}m q\r\nmd {}m\r\nmn\r\n",
    "ma {}c\r\nma {}c N0 J13 v\r\nma {}c v MD D4\r\nma {}c q\r\nmg {}c v\r\n",
    "ms {}m 2 ME\r\nab\r\nms {}m 2 ME\r\ncd\r\nms {}m 2 MR\r\nef\r\nmg {}m v\r\n",
];

/// Keys over 250 bytes. (memcached drops answers queued before a `get` with a too-long key on
/// the same connection; inkcached keeps them, so that `get` goes alone.)
fn key_too_long() -> Vec<Vec<u8>> {
    let k = "k".repeat(251);
    vec![
        format!("set {k} 0 0 3\r\nabc\r\ndelete {k}\r\nincr {k} 1\r\ntouch {k} 1\r\n").into_bytes(),
        format!("get a {k}\r\n").into_bytes(),
        format!("set {k} 0 0 3 noreply\r\nabc\r\n").into_bytes(),
    ]
}

#[test]
fn same_answers_as_memcached() {
    let Some(mc) = memcached() else {
        testkit::skip("/usr/bin/memcached is not installed");
        return;
    };
    let ink = inkcached(&[]);
    let mut scripts: Vec<Vec<u8>> = SCRIPTS
        .iter()
        .enumerate()
        .map(|(i, s)| s.replace("{}", &format!("s{i}_")).into_bytes())
        .collect();
    scripts.extend(key_too_long());
    let mut failures = Vec::new();
    for s in &scripts {
        let q = Duration::from_millis(150);
        let a = roundtrip_quiet(&mut connect(mc.port), s, q);
        let b = roundtrip_quiet(&mut connect(ink.port), s, q);
        if a != b {
            failures.push(format!(
                "request {:?}\n  memcached: {:?}\n  inkcached: {:?}",
                String::from_utf8_lossy(s),
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
