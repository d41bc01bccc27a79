//! Property tests for the request parser: no panic on any input, progress on every error, and
//! incremental feeding gives the same requests as feeding everything at once.

use inkproto::request::{parse_request, Request};
use proptest::prelude::*;

/// Feeds `input` through the parser the way a server does; returns a debug trace.
fn drive(input: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut swallow = 0usize;
    while pos < input.len() {
        if swallow > 0 {
            let n = swallow.min(input.len() - pos);
            pos += n;
            swallow -= n;
            continue;
        }
        match parse_request(&input[pos..]) {
            Ok(Some((r, used))) => {
                assert!(used > 0 && used <= input.len() - pos);
                out.push(format!("{r:?}"));
                pos += used;
            }
            Ok(None) => break,
            Err(e) => {
                if e.close {
                    out.push("close".into());
                    break;
                }
                assert!(e.consumed > 0 && e.consumed <= input.len() - pos);
                out.push(format!("{:?}", e.kind));
                pos += e.consumed;
                swallow = e.swallow;
            }
        }
    }
    out
}

fn tokens() -> impl Strategy<Value = Vec<u8>> {
    let word = prop_oneof![
        Just(b"get".to_vec()),
        Just(b"gets".to_vec()),
        Just(b"gat".to_vec()),
        Just(b"set".to_vec()),
        Just(b"cas".to_vec()),
        Just(b"append".to_vec()),
        Just(b"incr".to_vec()),
        Just(b"delete".to_vec()),
        Just(b"touch".to_vec()),
        Just(b"flush_all".to_vec()),
        Just(b"noreply".to_vec()),
        Just(b"mg".to_vec()),
        Just(b"ms".to_vec()),
        Just(b"ma".to_vec()),
        Just(b"md".to_vec()),
        Just(b"mn".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b" ".to_vec()),
        Just(b"-1".to_vec()),
        Just(b"0".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        (0u32..20).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..8),
        proptest::collection::vec(b'a'..=b'z', 1..300),
    ];
    proptest::collection::vec(word, 0..40).prop_map(|ws| ws.join(&b' '))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn no_panic_on_random_bytes(input in proptest::collection::vec(any::<u8>(), 0..4000)) {
        drive(&input);
    }

    #[test]
    fn no_panic_on_command_like_input(input in tokens()) {
        drive(&input);
    }

    #[test]
    fn split_feeding_is_equivalent(input in tokens(), cut in 0usize..2000) {
        // Requests parsed from a prefix must be a prefix of those parsed from the whole.
        let cut = cut.min(input.len());
        let whole = drive(&input);
        let part = drive(&input[..cut]);
        let part: Vec<_> = part.into_iter().filter(|s| s != "close").collect();
        prop_assert!(part.len() <= whole.len());
        prop_assert_eq!(&whole[..part.len()], &part[..]);
    }

    #[test]
    fn storage_roundtrip(key in "[a-z]{1,250}", flags: u32, exp in -10i64..100000, data in proptest::collection::vec(any::<u8>(), 0..3000), noreply: bool) {
        let mut buf = Vec::new();
        inkproto::client::store(&mut buf, inkproto::client::Store::Set, key.as_bytes(), flags, exp, &data, noreply);
        let (r, used) = parse_request(&buf).unwrap().unwrap();
        prop_assert_eq!(used, buf.len());
        match r {
            Request::Store { key: k, flags: f, exptime, data: d, noreply: nr, .. } => {
                prop_assert_eq!(k, key.as_bytes());
                prop_assert_eq!(f, flags);
                prop_assert_eq!(exptime, exp);
                prop_assert_eq!(d, &data[..]);
                prop_assert_eq!(nr, noreply);
            }
            other => prop_assert!(false, "{:?}", other),
        }
        // Any strict prefix is incomplete, never an error.
        for cut in [0, 1, buf.len() / 2, buf.len() - 1] {
            if cut < buf.len() {
                prop_assert_eq!(parse_request(&buf[..cut]), Ok(None));
            }
        }
    }
}
