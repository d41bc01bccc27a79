//! The request parser must never panic, and must always make progress or ask for more input.
//! `scripts/fuzz.sh [SECONDS]` runs it on the stable toolchain (make test: 30 s) with the
//! dictionary `memcache.dict` and the seeds in `seeds/`; with nightly and cargo-fuzz, from
//! crates/inkproto: `cargo +nightly fuzz run parse_request -- -dict=fuzz/memcache.dict`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pos = 0;
    let mut swallow = 0usize;
    while pos < data.len() {
        if swallow > 0 {
            let n = swallow.min(data.len() - pos);
            pos += n;
            swallow -= n;
            continue;
        }
        match inkproto::request::parse_request(&data[pos..]) {
            Ok(Some((req, used))) => {
                assert!(used > 0 && used <= data.len() - pos);
                let _ = req.mutated_keys();
                pos += used;
            }
            Ok(None) => break,
            Err(e) => {
                if e.close {
                    break;
                }
                assert!(e.consumed > 0 && e.consumed <= data.len() - pos);
                let _ = e.reply();
                pos += e.consumed;
                swallow = e.swallow;
            }
        }
    }
});
