//! Every mutation family, over UDP, a followed TCP connection, a connection not followed (opened
//! before attach) and IPv6: the keys it may change are invalidated before the server sees it,
//! nothing else is, and the keys fill again once the write is settled (by the server's answer, or
//! by the quarantine where there is no answer to wait for).
use super::*;

#[derive(Clone, Copy, Debug)]
pub enum Via {
    Udp,
    Tcp,
    TcpMidstream,
    Tcp6,
}

const BYSTANDER: &str = "bystander";

/// Fills `keys` and a bystander, sends `cmd` via `via`, and checks: the keys miss, the bystander
/// still hits, nothing was voided; then the keys refill once settled (`answer` from the server,
/// or the quarantine if None).
pub fn check(via: Via, cmd: &[u8], answer: Option<&[u8]>, keys: &[&str]) {
    let f = fx();
    let fl = match via {
        Via::Tcp6 => Flow::v6(),
        _ => Flow::v4(),
    };
    for k in keys.iter().chain([&BYSTANDER]) {
        f.fill(&fl, k, 0, b"old");
    }
    let what = format!("{via:?} {:?}", String::from_utf8_lossy(cmd));
    let mut conn = match via {
        Via::Udp => None,
        Via::TcpMidstream => Some(Conn::midstream(&f, fl.clone())),
        _ => Some(Conn::open(&f, fl.clone())),
    };
    let id = next_id();
    match conn.as_mut() {
        None => assert_eq!(f.udp_in(&fl.udp(id, cmd)), XDP_PASS, "{what}"),
        Some(c) => c.send(&f, cmd),
    }
    for k in keys {
        f.assert_miss(&fl, k);
    }
    let st = f.stats();
    assert_eq!(
        st.inval_unparsable, 0,
        "{what}: the cache was voided: {st:?}"
    );
    assert!(st.inval_command >= keys.len() as u64, "{what}: {st:?}");
    f.assert_hit(&fl, BYSTANDER, 0, b"old");

    // not settled yet: a reply to a get that arrives now may predate the write
    // (a UDP request of several commands or keys falls back to the quarantine)
    let settled_by_answer = answer.is_some()
        && !matches!(via, Via::TcpMidstream)
        && !(matches!(via, Via::Udp) && keys.len() > 1);
    if settled_by_answer || answer.is_none() {
        assert!(
            !f.fill_with(
                &fl,
                &format!("get {}\r\n", keys[0]),
                &value_reply(keys[0], 0, b"new")
            ),
            "{what}: filled before the write was settled"
        );
    }
    match (answer, conn.as_mut()) {
        (Some(a), None) => assert_eq!(f.egress(&fl.udp_reply(id, a)).action, CG_PASS),
        (Some(a), Some(c)) => c.answer(&f, a),
        (None, _) => {}
    }
    if !settled_by_answer {
        after_quarantine();
    }
    for k in keys {
        f.fill(&fl, k, 0, b"new");
        f.assert_hit(&fl, k, 0, b"new");
    }
}

macro_rules! families {
    ($($name:ident: $cmd:expr, $answer:expr, [$($key:expr),+];)*) => {
        mod udp { use super::*; $(#[test] fn $name() { check(Via::Udp, $cmd, $answer, &[$($key),+]) })* }
        mod tcp { use super::*; $(#[test] fn $name() { check(Via::Tcp, $cmd, $answer, &[$($key),+]) })* }
        mod tcp_midstream {
            use super::*;
            $(#[test] fn $name() { check(Via::TcpMidstream, $cmd, $answer, &[$($key),+]) })*
        }
        mod tcp6 { use super::*; $(#[test] fn $name() { check(Via::Tcp6, $cmd, $answer, &[$($key),+]) })* }
    };
}

families! {
    set: b"set a 0 0 1\r\nx\r\n", Some(b"STORED\r\n"), ["a"];
    set_noreply: b"set a 0 0 1 noreply\r\nx\r\n", None, ["a"];
    add: b"add a 0 0 1\r\nx\r\n", Some(b"NOT_STORED\r\n"), ["a"];
    replace: b"replace a 5 100 2\r\nxy\r\n", Some(b"STORED\r\n"), ["a"];
    append: b"append a 0 0 1\r\nx\r\n", Some(b"STORED\r\n"), ["a"];
    prepend: b"prepend a 0 0 1\r\nx\r\n", Some(b"STORED\r\n"), ["a"];
    cas: b"cas a 0 0 1 99\r\nx\r\n", Some(b"EXISTS\r\n"), ["a"];
    cas_noreply: b"cas a 0 0 1 99 noreply\r\nx\r\n", None, ["a"];
    incr: b"incr a 1\r\n", Some(b"2\r\n"), ["a"];
    decr: b"decr a 1\r\n", Some(b"0\r\n"), ["a"];
    delete: b"delete a\r\n", Some(b"DELETED\r\n"), ["a"];
    delete_noreply: b"delete a noreply\r\n", None, ["a"];
    touch: b"touch a 100\r\n", Some(b"TOUCHED\r\n"), ["a"];
    gat: b"gat 100 a b\r\n", Some(b"END\r\n"), ["a", "b"];
    gats: b"gats 100 a\r\n", Some(b"END\r\n"), ["a"];
    ms: b"ms a 1\r\nx\r\n", Some(b"HD\r\n"), ["a"];
    ms_flags: b"ms a 2 T100 F5\r\nxy\r\n", Some(b"HD\r\n"), ["a"];
    md: b"md a\r\n", Some(b"HD\r\n"), ["a"];
    ma: b"ma a\r\n", Some(b"NF\r\n"), ["a"];
    mg_touch: b"mg a T100 v\r\n", Some(b"EN\r\n"), ["a"];
    mg_vivify: b"mg a N30\r\n", Some(b"EN\r\n"), ["a"];
    pipelined: b"set a 0 0 1\r\nx\r\ndelete b\r\nincr c 5\r\n",
        Some(b"STORED\r\nNOT_FOUND\r\nNOT_FOUND\r\n"), ["a", "b", "c"];
}

#[test]
fn flush_all_voids_everything_until_answered() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "a", 0, b"1");
    f.fill(&fl, "b", 0, b"2");
    let mut c = Conn::open(&f, fl.clone());
    c.send(&f, b"flush_all\r\n");
    f.assert_miss(&fl, "a");
    f.assert_miss(&fl, "b");
    assert!(!f.fill_with(&fl, "get a\r\n", &value_reply("a", 0, b"1")));
    c.answer(&f, b"OK\r\n");
    f.fill(&fl, "a", 0, b"1");
    f.assert_hit(&fl, "a", 0, b"1");
    assert_eq!(f.stats().inval_flush, 1);
}

#[test]
fn flush_all_with_a_delay_refuses_fills_until_then() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "a", 0, b"1");
    let mut c = Conn::open(&f, fl.clone());
    c.send(&f, b"flush_all 1000\r\n");
    c.answer(&f, b"OK\r\n");
    f.assert_miss(&fl, "a");
    assert!(!f.fill_with(&fl, "get a\r\n", &value_reply("a", 0, b"1")));
}

#[test]
fn a_reads_only_pipeline_invalidates_nothing() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "a", 0, b"1");
    let mut c = Conn::open(&f, fl.clone());
    c.send(
        &f,
        b"get a\r\ngets a b\r\nmg a v\r\nstats\r\nversion\r\nmn\r\n",
    );
    f.assert_hit(&fl, "a", 0, b"1");
    assert_eq!(f.stats().invalidations, 0);
}
