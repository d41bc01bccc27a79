//! Unit tests of the request parser (a file of their own to keep request.rs short).
use super::*;

fn one(b: &[u8]) -> (Request<'_>, usize) {
    parse_request(b).unwrap().unwrap()
}
fn error(b: &[u8]) -> ProtoError {
    parse_request(b).unwrap_err()
}

#[test]
fn get_keys() {
    let (r, n) = one(b"get a  bb ccc\r\nrest");
    assert_eq!(n, 15);
    let Request::Get { keys, cas: false } = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        keys.iter().collect::<Vec<_>>(),
        vec![&b"a"[..], b"bb", b"ccc"]
    );
    let (r, _) = one(b"gats 10 k\n");
    assert!(matches!(
        r,
        Request::Gat {
            exptime: 10,
            cas: true,
            ..
        }
    ));
    assert_eq!(parse_request(b"get a"), Ok(None));
}

#[test]
fn many_keys_beyond_token_limit() {
    let mut line = b"get".to_vec();
    for i in 0..100 {
        line.extend_from_slice(format!(" k{i}").as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    let (r, _) = one(&line);
    let Request::Get { keys, .. } = r else {
        panic!()
    };
    assert_eq!(keys.iter().count(), 100);
}

#[test]
fn storage() {
    let (r, n) = one(b"set k 5 -1 3 noreply\r\nabc\r\nget");
    assert_eq!(n, 27);
    assert_eq!(
        r,
        Request::Store {
            cmd: StoreCmd::Set,
            key: b"k",
            flags: 5,
            exptime: -1,
            data: b"abc",
            cas: 0,
            noreply: true
        }
    );
    assert_eq!(parse_request(b"set k 0 0 3\r\nab"), Ok(None));
    let (r, _) = one(b"cas k 0 0 1 99\r\nx\r\n");
    assert!(matches!(
        r,
        Request::Store {
            cmd: StoreCmd::Cas,
            cas: 99,
            ..
        }
    ));
    // flags keep the low 32 bits, as memcached does
    let (r, _) = one(b"set k 4294967296 0 1\r\nb\r\n");
    assert!(matches!(r, Request::Store { flags: 0, .. }));
}

#[test]
fn errors_match_memcached() {
    assert_eq!(error(b"bogus\r\n").reply().unwrap(), "ERROR\r\n");
    assert_eq!(error(b"m\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(error(b"GET a\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(error(b"get\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(error(b"set a\r\n").kind, ErrorKind::UnknownCommand);
    assert_eq!(
        error(b"set k 0 0 1 noreply x\r\n").kind,
        ErrorKind::UnknownCommand
    );
    let long = [b'k'; 251];
    let mut l = b"get a ".to_vec();
    l.extend_from_slice(&long);
    l.extend_from_slice(b"\r\n");
    assert_eq!(error(&l).kind, ErrorKind::BadFormat);
    let e = error(b"set k 0 0 -1\r\nabc\r\n");
    assert_eq!(
        (e.kind, e.consumed, e.swallow),
        (ErrorKind::BadFormat, 14, 0)
    );
    let e = error(b"set k 0 0 3\r\nabcde\r\n");
    assert_eq!((e.kind, e.consumed), (ErrorKind::BadDataChunk, 18));
    let e = error(b"set k 0 0 2000000 noreply\r\n");
    assert_eq!(
        (e.kind, e.swallow, e.noreply),
        (ErrorKind::TooLarge, 2000002, true)
    );
    assert_eq!(e.reply(), None);
    assert_eq!(error(b"incr k x\r\n").kind, ErrorKind::InvalidDelta);
    assert_eq!(error(b"incr k -1\r\n").kind, ErrorKind::InvalidDelta);
    assert_eq!(error(b"touch k x\r\n").kind, ErrorKind::InvalidExptime);
    assert_eq!(error(b"gat x k\r\n").kind, ErrorKind::InvalidExptime);
    assert_eq!(error(b"delete a 1\r\n").kind, ErrorKind::DeleteUsage);
    assert!(matches!(
        one(b"flush_all x\r\n").0,
        Request::FlushAll { delay: None, .. }
    ));
    assert!(matches!(
        one(b"flush_all 10 20\r\n").0,
        Request::FlushAll {
            delay: Some(10),
            ..
        }
    ));
    assert_eq!(error(b"verbosity x\r\n").kind, ErrorKind::BadFormat);
    assert!(error(b"verbosity x noreply\r\n").noreply);
    let e = error(b"set k 0 0 2147483647\r\n");
    assert_eq!((e.kind, e.swallow), (ErrorKind::BadFormat, 0));
    assert!(error(b"GET / HTTP/1.1\r\n").close);
    assert!(error(b"POST /x HTTP/1.0\r\n").close);
    assert!(!error(b"sGET / HTTP/1.1\r\n").close);
    assert!(matches!(one(b"bget a\r\n").0, Request::Get { .. }));
    assert!(matches!(one(b"stats items\r\n").0, Request::Admin { .. }));
    assert!(matches!(
        one(b"delete a 0 noreply\r\n").0,
        Request::Delete { noreply: true, .. }
    ));
    assert!(error(&[b'x'; 3000]).close);
    let mut g = b"get ".to_vec();
    g.extend_from_slice(&[b'x'; 3000]);
    assert_eq!(parse_request(&g), Ok(None));
}

#[test]
fn meta() {
    let (r, _) = one(b"mg foo v f T30\r\n");
    let Request::Meta {
        cmd: MetaCmd::Get,
        key,
        flags,
        ..
    } = r.clone()
    else {
        panic!()
    };
    assert_eq!(key, b"foo");
    assert!(flags.has(b'v'));
    assert_eq!(flags.get(b'T'), Some(&b"30"[..]));
    assert!(r.is_mutation());
    let (r, n) = one(b"ms foo 2 T0 F5\r\nhi\r\n");
    assert_eq!(n, 20);
    assert!(matches!(
        r,
        Request::Meta {
            cmd: MetaCmd::Set,
            data: Some(b"hi"),
            ..
        }
    ));
    assert!(matches!(
        one(b"mn\r\n").0,
        Request::Meta {
            cmd: MetaCmd::Noop,
            ..
        }
    ));
    assert_eq!(error(b"ms k S2\r\n").kind, ErrorKind::BadFormat);
    assert_eq!(error(b"mx k\r\n").kind, ErrorKind::UnknownCommand);
}

#[test]
fn mutations() {
    assert_eq!(one(b"get a b\r\n").0.mutated_keys(), Mutation::None);
    assert_eq!(
        one(b"gat 1 a b\r\n").0.mutated_keys(),
        Mutation::Keys(vec![b"a", b"b"])
    );
    assert_eq!(
        one(b"incr a 1\r\n").0.mutated_keys(),
        Mutation::Keys(vec![b"a"])
    );
    assert_eq!(one(b"flush_all\r\n").0.mutated_keys(), Mutation::All);
    assert!(!one(b"mg a v\r\n").0.is_mutation());
    assert!(one(b"md a\r\n").0.is_mutation());
}
