//! Scatter-gather end to end: client and workers in separate namespaces joined by veths (real
//! interfaces: checksums, MACs and routes as between hosts), the real verifier and kernel.
mod common;

use std::time::Duration;

use common::*;
use inksg::{
    topo::{in_netns, Topology},
    worker::{Behaviour, SocketWorker},
    Client, ClientOpts, Delivery, Elem, Policy, Reducer, Status,
};

const T: Duration = Duration::from_millis(200);

#[test]
fn wait_all_sums_the_answers_of_xdp_workers() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sga", 2).unwrap();
    let _w = xdp_workers(&t);
    let ws = workers(&t, 4, false);
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&ws).unwrap();
        for delivery in [Delivery::Epoll, Delivery::BusyPoll] {
            let mut c = Client::new(
                sg.clone(),
                false,
                ClientOpts {
                    delivery,
                    ..Default::default()
                },
            )
            .unwrap();
            for round in 0..20u64 {
                let id = c
                    .scatter(
                        &g,
                        &vec_u64(4, round),
                        Policy::All,
                        Reducer::Sum(Elem::U64, 4),
                        T,
                    )
                    .unwrap();
                let done = c.wait(Duration::from_secs(2)).unwrap().expect("completion");
                assert_eq!(done.req_id, id);
                assert_eq!(
                    done.status,
                    Status::Done,
                    "{done:?} {:?}",
                    sg.stats().unwrap()
                );
                assert!(done.missing.is_empty());
                assert_eq!(done.answered, 8);
                let want: Vec<u64> = (0..4).map(|i| 8 * (round + i)).collect();
                assert_eq!(done.u64s(), want);
            }
        }
        let st = sg.stats().unwrap();
        assert_eq!(st.completed, 40, "{st:?}");
        assert_eq!(st.answers, 320, "{st:?}");
        assert_eq!(
            st.duplicates + st.late + st.malformed + st.clone_errors,
            0,
            "{st:?}"
        );
    })
    .unwrap();
}

#[test]
fn many_requests_in_flight_are_matched_by_id() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgb", 2).unwrap();
    let _w = xdp_workers(&t);
    let ws = workers(&t, 3, false);
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&ws).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        let mut want = std::collections::HashMap::new();
        for i in 0..48u32 {
            let id = c
                .scatter(
                    &g,
                    &i.to_be_bytes(),
                    Policy::All,
                    Reducer::Max(Elem::U32, 1),
                    T,
                )
                .unwrap();
            want.insert(id, i);
        }
        while !want.is_empty() {
            let d = c.wait(Duration::from_secs(2)).unwrap().expect("completion");
            let v = want.remove(&d.req_id).expect("known id, reported once");
            assert_eq!(d.status, Status::Done);
            assert_eq!(d.u32s(), vec![v]);
        }
    })
    .unwrap();
}

#[test]
fn policies_any_and_n_and_the_reducers() {
    if !root_or_skip() {
        return;
    }
    let t = Topology::new("sgp", 1).unwrap();
    let ws = workers(&t, 4, false);
    // socket workers: worker i answers [i+1, 10*(i+1), 0 or 1]; worker 3 is slow
    let _w: Vec<SocketWorker> = in_netns(&t.workers[0].ns, || {
        ws.iter()
            .enumerate()
            .map(|(i, a)| {
                let v = (i as u32 + 1).to_be_bytes();
                let mut ans = v.to_vec();
                ans.extend_from_slice(&(10 * (i as u32 + 1)).to_be_bytes());
                ans.extend_from_slice(&((i % 2) as u32).to_be_bytes());
                let b = if i == 3 {
                    Behaviour::Late(Duration::from_millis(100))
                } else {
                    Behaviour::Answer(ans)
                };
                SocketWorker::spawn(*a, b).unwrap()
            })
            .collect()
    })
    .unwrap();
    in_netns(&t.client, || {
        let sg = attach(&t);
        let g = sg.group(&ws[..3]).unwrap();
        let mut c = Client::new(sg.clone(), false, ClientOpts::default()).unwrap();
        let mut run = |p: Policy, r: Reducer| {
            c.scatter(&g, b"q", p, r, T).unwrap();
            c.wait(Duration::from_secs(2)).unwrap().expect("completion")
        };
        let d = run(Policy::All, Reducer::Sum(Elem::U32, 3));
        assert_eq!(d.u32s(), vec![6, 60, 1]);
        let d = run(Policy::All, Reducer::Min(Elem::U32, 3));
        assert_eq!(d.u32s(), vec![1, 10, 0]);
        let d = run(Policy::All, Reducer::Max(Elem::U32, 3));
        assert_eq!(d.u32s(), vec![3, 30, 1]);
        let d = run(Policy::All, Reducer::Count(Elem::U32, 3));
        assert_eq!(d.u32s(), vec![3, 3, 1]);
        let d = run(Policy::Any, Reducer::Count(Elem::U32, 3));
        assert_eq!((d.status, d.answered), (Status::Done, 1));
        assert_eq!(d.u32s()[0], 1);
        assert_eq!(d.missing.len(), 2);
        let d = run(Policy::N(2), Reducer::Count(Elem::U32, 3));
        assert_eq!((d.status, d.answered), (Status::Done, 2));
        assert_eq!(d.u32s()[0], 2);
        let d = run(Policy::All, Reducer::Concat);
        let mut got: Vec<(u16, Vec<u8>)> = d
            .records()
            .iter()
            .map(|r| (r.worker, r.data.to_vec()))
            .collect();
        got.sort();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].0, 2);
        assert_eq!(&got[2].1[..4], &3u32.to_be_bytes());
        // the extra answers of Any/N requests came after completion: dropped, counted late
        std::thread::sleep(Duration::from_millis(50));
        let st = sg.stats().unwrap();
        assert_eq!(st.late, 3, "{st:?}");
        assert_eq!(st.duplicates, 0, "{st:?}");
    })
    .unwrap();
}
