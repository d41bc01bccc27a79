//! The TCP engine: non-blocking connections, up to `pipeline` requests outstanding on each,
//! replies matched in order.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Instant;

use anyhow::{Context, Result};
use inkproto::client::parse_response;
use nix::poll::PollFlags;

use crate::config::RunConfig;
use crate::engine::{wait, RunControl, ThreadOut, ThreadPlan, Window};
use crate::pacer::Pacer;
use crate::workload::{Op, OpKind, Workload};

struct Conn {
    stream: TcpStream,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    /// Requests written (or in `wbuf`), oldest first: replies come in this order.
    pending: VecDeque<Op>,
    /// Open loop: requests due while the pipeline was full, sent as replies free room.
    backlog: VecDeque<(Op, Vec<u8>)>,
    dead: bool,
}

/// Connects with `TCP_NODELAY`, blocking.
pub fn connect(server: std::net::SocketAddr, timeout: std::time::Duration) -> Result<TcpStream> {
    let s = TcpStream::connect_timeout(&server, timeout)
        .with_context(|| format!("connecting to {server} over TCP"))?;
    s.set_nodelay(true)?;
    Ok(s)
}

struct Engine<'a> {
    cfg: &'a RunConfig,
    conns: Vec<Conn>,
    work: Workload,
    out: ThreadOut,
    rr: usize,
    completed: u64,
}

pub(crate) fn run_thread(
    cfg: &RunConfig,
    plan: &ThreadPlan,
    win: Window,
    ctl: &RunControl,
) -> Result<ThreadOut> {
    let conns = (0..plan.connections)
        .map(|_| {
            let stream = connect(cfg.server, cfg.timeout)?;
            stream.set_nonblocking(true)?;
            Ok(Conn {
                stream,
                wbuf: Vec::new(),
                wpos: 0,
                rbuf: Vec::new(),
                pending: VecDeque::new(),
                backlog: VecDeque::new(),
                dead: false,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut e = Engine {
        cfg,
        conns,
        work: Workload::new(cfg, plan.seed),
        out: ThreadOut::new(),
        rr: 0,
        completed: 0,
    };
    let mut pacer = plan.rate.map(|(r, t0)| Pacer::new(t0, r));
    let hard_end = win.end + cfg.timeout;
    let mut tmp = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        // Open loop: requests scheduled before the end are all sent, even late.
        let stopping = ctl.is_stopped()
            || match &pacer {
                Some(p) => p.next_due() >= win.end,
                None => now >= win.end,
            };
        if e.conns.iter().all(|c| c.dead) {
            break;
        }
        if !stopping {
            match &mut pacer {
                Some(p) => p.issue_due(now, win.end, 4096, |t| {
                    e.issue_open(t, win.measured(t));
                }),
                None => {
                    while e.pending_total() < plan.inflight
                        && e.issue_closed(now, win.measured(now))
                    {}
                }
            }
        }
        for c in &mut e.conns {
            Engine::write(c, &mut e.out);
        }
        let outstanding = e
            .conns
            .iter()
            .any(|c| !c.dead && (!c.pending.is_empty() || !c.backlog.is_empty()));
        if stopping && (!outstanding || now >= hard_end) {
            break;
        }
        let mut until = hard_end;
        if !stopping {
            until = match &pacer {
                Some(p) => p.next_due().min(win.end),
                None => win.end,
            };
        }
        let live: Vec<usize> = (0..e.conns.len()).filter(|&i| !e.conns[i].dead).collect();
        let fds: Vec<_> = live.iter().map(|&i| e.conns[i].stream.as_fd()).collect();
        let evs: Vec<_> = live
            .iter()
            .map(|&i| {
                if e.conns[i].wpos < e.conns[i].wbuf.len() {
                    PollFlags::POLLIN | PollFlags::POLLOUT
                } else {
                    PollFlags::POLLIN
                }
            })
            .collect();
        let ready = wait(&fds, &evs, Some(until))?;
        for (k, &i) in live.iter().enumerate() {
            if !ready[k].is_empty() {
                e.read(i, &mut tmp);
            }
        }
        ctl.completed.fetch_add(
            std::mem::take(&mut e.completed),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    for c in &mut e.conns {
        for op in c.pending.drain(..).chain(c.backlog.drain(..).map(|b| b.0)) {
            if op.measured {
                e.out.counters.lost += 1;
            }
        }
    }
    Ok(e.out)
}

impl Engine<'_> {
    fn pending_total(&self) -> usize {
        self.conns.iter().map(|c| c.pending.len()).sum()
    }

    fn count_request(&mut self, op: &Op) {
        if op.measured {
            let c = &mut self.out.counters;
            c.requests += 1;
            match op.kind {
                OpKind::Get => c.gets += 1,
                OpKind::Set => c.sets += 1,
            }
        }
    }

    /// Closed loop: a request on the next connection with room; false if none has room.
    fn issue_closed(&mut self, now: Instant, measured: bool) -> bool {
        let n = self.conns.len();
        for _ in 0..n {
            let i = self.rr % n;
            self.rr = self.rr.wrapping_add(1);
            let c = &mut self.conns[i];
            if c.dead || c.pending.len() >= self.cfg.pipeline {
                continue;
            }
            let op = self.work.next_request(now, measured, &mut c.wbuf);
            c.pending.push_back(op.clone());
            self.count_request(&op);
            return true;
        }
        false
    }

    /// Open loop: a request due at `t` on the next live connection, held back while its
    /// pipeline is full (its latency still counts from `t`).
    fn issue_open(&mut self, t: Instant, measured: bool) {
        let n = self.conns.len();
        for _ in 0..n {
            let i = self.rr % n;
            self.rr = self.rr.wrapping_add(1);
            if self.conns[i].dead {
                continue;
            }
            let mut buf = Vec::new();
            let op = self.work.next_request(t, measured, &mut buf);
            self.count_request(&op);
            let c = &mut self.conns[i];
            if c.pending.len() < self.cfg.pipeline {
                c.wbuf.extend_from_slice(&buf);
                c.pending.push_back(op);
            } else {
                c.backlog.push_back((op, buf));
            }
            return;
        }
    }

    fn write(c: &mut Conn, out: &mut ThreadOut) {
        while !c.dead && c.wpos < c.wbuf.len() {
            match c.stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => Self::kill(c, out),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => Self::kill(c, out),
            }
        }
        if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            c.wpos = 0;
        }
    }

    /// A failed connection: its outstanding requests are lost.
    fn kill(c: &mut Conn, out: &mut ThreadOut) {
        if c.dead {
            return;
        }
        c.dead = true;
        out.counters.conn_errors += 1;
        for op in c.pending.drain(..).chain(c.backlog.drain(..).map(|b| b.0)) {
            if op.measured {
                out.counters.lost += 1;
            }
        }
    }

    fn read(&mut self, i: usize, tmp: &mut [u8]) {
        let c = &mut self.conns[i];
        loop {
            match c.stream.read(tmp) {
                Ok(0) => {
                    Self::kill(c, &mut self.out);
                    return;
                }
                Ok(n) => c.rbuf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    Self::kill(c, &mut self.out);
                    return;
                }
            }
        }
        let now = Instant::now();
        let mut pos = 0;
        loop {
            match parse_response(&c.rbuf[pos..]) {
                Ok(None) => break,
                Ok(Some((resp, used))) => {
                    pos += used;
                    let Some(op) = c.pending.pop_front() else {
                        // An answer nobody asked for.
                        self.out.counters.unmatched += 1;
                        continue;
                    };
                    self.completed += 1;
                    self.work.account(&op, &resp, &mut self.out.counters);
                    self.out.record(&op, now);
                    if let Some((op, buf)) = c.backlog.pop_front() {
                        c.wbuf.extend_from_slice(&buf);
                        c.pending.push_back(op);
                    }
                }
                Err(_) => {
                    // The stream cannot be resynchronised: count the head as an error, drop
                    // the connection.
                    if let Some(op) = c.pending.pop_front() {
                        if op.measured {
                            self.out.counters.responses += 1;
                            self.out.counters.errors += 1;
                        }
                    }
                    Self::kill(c, &mut self.out);
                    pos = c.rbuf.len();
                    break;
                }
            }
        }
        c.rbuf.drain(..pos);
        Self::write(c, &mut self.out);
    }
}
