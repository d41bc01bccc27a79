//! Workers: the XDP worker (`bpf/sg/sg_worker.bpf.c`: answers generic requests in the kernel,
//! for benchmarks) and socket workers (user space, with misbehaviours for tests).
use std::{
    net::{SocketAddr, UdpSocket},
    os::fd::AsFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{Object, ObjectBuilder, Xdp, XdpFlags};

use crate::{skel, wire};

/// An XDP program attached to an interface (native mode), detached on drop.
pub struct XdpProg {
    obj: Object,
    netns: std::fs::File,
    prog: String,
    ifindex: i32,
}

impl XdpProg {
    /// The XDP worker on `iface`: answers requests to UDP ports `lo..=hi` (echoing the data).
    pub fn worker(iface: &str, lo: u16, hi: u16) -> Result<XdpProg> {
        Self::load(iface, "sg_worker", Some((lo, hi)))
    }

    /// A program that passes everything (the peer of a veth whose other end sends XDP_TX).
    pub fn pass(iface: &str) -> Result<XdpProg> {
        Self::load(iface, "sg_pass", None)
    }

    fn load(iface: &str, prog: &str, ports: Option<(u16, u16)>) -> Result<XdpProg> {
        let c = std::ffi::CString::new(iface)?;
        // SAFETY: if_nametoindex reads a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) } as i32;
        if ifindex == 0 {
            bail!("no interface {iface}");
        }
        let mut open = ObjectBuilder::default()
            .open_memory(skel::WORKER_OBJ)
            .context("opening the worker object")?;
        if let Some((lo, hi)) = ports {
            for mut m in open.maps_mut() {
                if m.name().to_string_lossy().ends_with(".rodata") {
                    type R = skel::worker::types::rodata;
                    let v = m.initial_value_mut().context("worker constants")?;
                    let o = std::mem::offset_of!(R, port_lo);
                    v[o..o + 2].copy_from_slice(&lo.to_ne_bytes());
                    let o = std::mem::offset_of!(R, port_hi);
                    v[o..o + 2].copy_from_slice(&hi.to_ne_bytes());
                }
            }
        }
        let obj = open.load().context("loading the worker program")?;
        let p = XdpProg {
            obj,
            netns: crate::topo::current_netns()?,
            prog: prog.to_string(),
            ifindex,
        };
        {
            let pr = p.program()?;
            Xdp::new(pr.as_fd())
                .attach(ifindex, XdpFlags::DRV_MODE)
                .with_context(|| format!("attaching {prog} to {iface}"))?;
        }
        Ok(p)
    }

    fn program(&self) -> Result<libbpf_rs::Program<'_>> {
        self.obj
            .progs()
            .find(|x| x.name() == self.prog.as_str())
            .ok_or_else(|| anyhow!("no program {}", self.prog))
    }
}

impl Drop for XdpProg {
    fn drop(&mut self) {
        // Detached in the namespace it was attached in, wherever this runs.
        if let Ok(p) = self.program() {
            let fd = p.as_fd();
            let _ = crate::topo::in_netns_fd(&self.netns, || {
                let _ = Xdp::new(fd).detach(self.ifindex, XdpFlags::DRV_MODE);
            });
        }
    }
}

/// How a socket worker behaves.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Answers with the request's data (after its `struct sg_req_hdr`).
    Echo,
    /// Answers with these bytes.
    Answer(Vec<u8>),
    /// Never answers.
    Silent,
    /// Answers twice.
    Twice,
    /// Answers after a delay.
    Late(Duration),
    /// Answers with bytes that are not an answer.
    Garbage,
}

/// A worker in user space on its own thread (a real UDP socket), stopped on drop.
pub struct SocketWorker {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SocketWorker {
    /// Binds `addr` (in the calling thread's network namespace) and serves on a new thread.
    pub fn spawn(addr: SocketAddr, behaviour: Behaviour) -> Result<SocketWorker> {
        let sock = UdpSocket::bind(addr).with_context(|| format!("binding worker {addr}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(20)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let req = &buf[..n];
                if n < wire::REQ_HDR || req[..4] != wire::MAGIC_REQ.to_be_bytes() {
                    continue;
                }
                let mut ans = Vec::with_capacity(n);
                ans.extend_from_slice(&wire::MAGIC_ANS.to_be_bytes());
                ans.extend_from_slice(&req[4..8]);
                ans.extend_from_slice(&[0, 0, 0, 0]);
                match &behaviour {
                    Behaviour::Echo | Behaviour::Twice | Behaviour::Late(_) => {
                        ans.extend_from_slice(&req[wire::REQ_HDR..])
                    }
                    Behaviour::Answer(b) => ans.extend_from_slice(b),
                    Behaviour::Silent => continue,
                    Behaviour::Garbage => {
                        ans = b"this is not an answer at all".to_vec();
                    }
                }
                if let Behaviour::Late(d) = &behaviour {
                    std::thread::sleep(*d);
                }
                let _ = sock.send_to(&ans, from);
                if let Behaviour::Twice = &behaviour {
                    let _ = sock.send_to(&ans, from);
                }
            }
        });
        Ok(SocketWorker {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for SocketWorker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
