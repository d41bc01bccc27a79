//! inksg: scatter-gather in the kernel. One `send` from the application leaves as one datagram
//! per worker (a TC egress program clones and rewrites it), the workers' answers are matched,
//! deduplicated and aggregated by an XDP program on the same interface, and the application
//! wakes once, when its completion policy is met or its timeout fires.
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use inksg::{AttachOpts, Client, ClientOpts, Elem, Policy, Reducer, Sg};
//! # fn main() -> anyhow::Result<()> {
//! let sg = Arc::new(Sg::attach(&AttachOpts { ifaces: vec!["eth0".into()], ..Default::default() })?);
//! let group = sg.group(&["10.0.0.1:7000".parse()?, "10.0.0.2:7000".parse()?])?;
//! let mut client = Client::new(sg.clone(), false, ClientOpts::default())?;
//! client.scatter(&group, &[0, 0, 0, 0, 0, 0, 0, 1], Policy::All, Reducer::Sum(Elem::U64, 1), Duration::from_millis(10))?;
//! let done = client.wait(Duration::from_secs(1))?.expect("a completion");
//! println!("{:?}: sum {:?}, missing {:?}", done.status, done.u64s(), done.missing);
//! # Ok(()) }
//! ```
pub mod bench;
pub mod client;
pub mod kernel;
pub mod ketama;
pub mod mc;
pub mod skel;
pub mod topo;
pub mod wire;
pub mod worker;

pub use client::{
    Client, ClientOpts, Completion, Delivery, Elem, Policy, Proto, Record, Reducer, Status,
};
pub use kernel::{AttachOpts, Group, Sg, Stats, XdpMode};
