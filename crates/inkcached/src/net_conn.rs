//! A client connection: its stream (TCP or unix), buffers, protocol session, and the loop
//! that reads, executes and writes for it (a child of `net`).

use super::*;

/// A connection's stream: TCP or a unix socket.
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(super) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }
    pub(super) fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub(super) struct Conn {
    pub(super) sock: Stream,
    pub(super) rbuf: Vec<u8>,
    pub(super) rstart: usize,
    pub(super) rend: usize,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    /// In cooperative mode only wbuf[..safe] may be written: answers wait until the kernel
    /// cache operations of their requests are committed (once per event-loop round, see
    /// run_worker, or at once before the connection closes).
    pub(super) safe: usize,
    pub(super) swallow: usize,
    pub(super) closing: bool,
    /// Close after writing only what was flushed (`keep`).
    pub(super) dropping: bool,
    /// Output up to here is written even if the connection is dropped.
    pub(super) keep: usize,
    /// Buffered requests wait for the next read (see `Next::Pause`).
    pub(super) paused: bool,
    pub(super) session: Session,
    /// Relative time of the last command (`stats conns`, `-o idle_timeout`).
    pub(super) last_cmd: Arc<AtomicU32>,
    /// A `watch` connection: its log lines arrive here.
    pub(super) watch: Option<Arc<Mutex<Vec<u8>>>>,
    /// Flash values this connection holds (read for a parked request and the gets pipelined
    /// behind it), released once it has executed every complete request it has.
    pub(super) wait: Option<Ticket>,
    /// The request at `rstart` waits for `wait`'s reads: executed again once they are in.
    pub(super) parked: bool,
    /// Why it closes, for `watch connevents` (an error unless set otherwise).
    pub(super) close_reason: crate::watch::CloseReason,
}

#[derive(PartialEq, Eq)]
pub(super) enum Status {
    /// Wait for the next readiness event.
    Idle,
    /// Has more work: resume after serving others.
    More,
    Close,
}

impl Conn {
    pub(super) fn new(sock: Stream, session: Session, now: u32) -> Self {
        Conn {
            sock,
            rbuf: vec![0; 16 * 1024],
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            safe: 0,
            swallow: 0,
            closing: false,
            close_reason: crate::watch::CloseReason::Error,
            dropping: false,
            keep: 0,
            paused: false,
            session,
            last_cmd: Arc::new(AtomicU32::new(now)),
            watch: None,
            wait: None,
            parked: false,
        }
    }

    fn backlog(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// True if output waits for a cooperative-mode commit.
    pub(super) fn held(&self) -> bool {
        crate::coop::enabled() && self.safe < self.wbuf.len()
    }

    /// After the worker's commit: writes what waited for it.
    pub(super) fn release(&mut self, sh: &Shared, w: usize) -> Status {
        self.safe = self.wbuf.len();
        if self.flush(sh, w).is_err() || (self.closing && self.backlog() == 0) {
            return Status::Close;
        }
        Status::Idle
    }

    /// Commits now what waits (before the connection closes).
    fn commit_now(&mut self, sh: &Shared, w: usize) {
        if self.held() {
            crate::coop::commit(sh, w);
            self.safe = self.wbuf.len();
        }
    }

    /// Executes the complete requests in the read buffer, at most `-R` of them; true if it
    /// stopped there with more to do (memcached's `conn_yields`).
    fn process(&mut self, sh: &Arc<Shared>, w: usize, limits: &Limits, tok: Token) -> bool {
        let mut reqs = 0;
        let max = sh.cfg.reqs_per_event.max(1) as usize;
        let mut mwrite = None;
        // stopped with a command line in and its data block not (memcached's conn_nread)
        let mut nread = false;
        self.session.auth_mark = None;
        while self.rstart < self.rend && !self.closing && !self.paused && self.backlog() < WBUF_HIGH
        {
            if self.watch.is_some() {
                // A watcher sends no more commands; whatever comes is dropped.
                self.rstart = self.rend;
                break;
            }
            if self.parked {
                if self.wait.is_some_and(|t| !extio::is_ready(t)) {
                    break;
                }
                self.parked = false;
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.rend - self.rstart);
                self.rstart += n;
                self.swallow -= n;
                continue;
            }
            if reqs == max {
                sh.workers[w].inc(C::conn_yields);
                return true;
            }
            let buf = &self.rbuf[self.rstart..self.rend];
            // answers queued and not written yet (memcached writes at get, mn and noop)
            self.session.ctx.stacked = self.wbuf.len() > self.keep.max(self.wpos);
            let session = &mut self.session;
            let mut step = Step::NeedMore;
            let attempt = extio::attempt(&sh.workers[w], self.wait, &mut self.wbuf, |out| {
                step = session.step(sh, w, limits, buf, out);
                match &step {
                    Step::Done { next, .. } => *next,
                    Step::NeedMore => Next::Continue,
                }
            });
            if let Attempt::Wait(t) = attempt {
                // A value on flash is being read: this request runs again once it is in.
                extio::watch(t, tok);
                self.wait = Some(t);
                self.parked = true;
                // Read ahead for the gets pipelined behind it.
                if let Step::Done { used, .. } = step {
                    let mut pos = self.rstart + used;
                    for _ in 0..16 {
                        match inkproto::request::parse_request_with(
                            &self.rbuf[pos..self.rend],
                            limits,
                        ) {
                            Ok(Some((next, n))) => {
                                extio::prefetch(&sh.store, t, &next);
                                pos += n;
                            }
                            _ => break,
                        }
                    }
                }
                break;
            }
            match step {
                Step::NeedMore => {
                    // a text command line has come whole, or a binary request's header
                    nread = if self.session.proto == crate::config::Proto::Binary {
                        buf.len() >= inkproto::binary::HEADER_LEN
                    } else {
                        buf.contains(&b'\n')
                    };
                    break;
                }
                Step::Done {
                    used,
                    swallow,
                    next,
                } => {
                    reqs += 1;
                    mwrite = Some(next == Next::Flush);
                    self.rstart += used;
                    self.swallow = swallow;
                    match next {
                        Next::Continue => {}
                        Next::Flush => self.keep = self.wbuf.len(),
                        Next::Pause => {
                            self.keep = self.wbuf.len();
                            self.paused = true;
                        }
                        Next::Close => self.closing = true,
                        Next::Quit => {
                            self.closing = true;
                            self.close_reason = crate::watch::CloseReason::Normal;
                        }
                        Next::Drop | Next::Shutdown => {
                            if next == Next::Shutdown {
                                self.close_reason = crate::watch::CloseReason::Shutdown;
                            }
                            // what memcached had not written yet is lost
                            self.wbuf.truncate(self.keep.max(self.wpos));
                            self.closing = true;
                            self.dropping = true;
                        }
                        Next::Watch => {
                            let buf = Arc::new(Mutex::new(Vec::new()));
                            let flags = self.session.ctx.watch_flags;
                            let id = self.session.ctx.id;
                            if crate::watch::register(id, w, flags, buf.clone(), &mut self.wbuf) {
                                self.watch = Some(buf);
                            }
                        }
                    }
                }
            }
        }
        if !self.parked {
            // Every complete request (those read ahead for included) was executed.
            if let Some(t) = self.wait.take() {
                extio::release(t);
            }
        }
        use crate::conns::{MWRITE, NREAD, TIME};
        let nread_bit = if nread { NREAD } else { 0 };
        if let Some(m) = mwrite {
            // time of the last command, whether it left the connection writing, and whether
            // the next one waits for its data (what memcached's `stats conns` shows as
            // conn_mwrite and conn_nread)
            let t = sh.store.now() & TIME;
            self.last_cmd.store(
                t | if m { MWRITE } else { 0 } | nread_bit,
                Ordering::Relaxed,
            );
        } else if nread {
            self.last_cmd.fetch_or(NREAD, Ordering::Relaxed);
        } else {
            self.last_cmd.fetch_and(!NREAD, Ordering::Relaxed);
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() > 1 << 20 {
                self.rbuf = vec![0; 16 * 1024];
            }
        }
        false
    }

    /// A watcher's log lines, moved to the output once what was moved before is written:
    /// while the watcher does not read, its lines stay in the bounded buffer, where those that
    /// do not fit are skipped (memcached's logger writes from that buffer alone). True if any.
    fn take_watch(&mut self) -> bool {
        let Some(b) = &self.watch else {
            return false;
        };
        if self.wpos < self.wbuf.len() {
            return false;
        }
        let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
        self.wbuf.extend_from_slice(&b);
        b.clear();
        self.wpos < self.wbuf.len()
    }

    /// Writes pending output; Err on a dead connection.
    fn flush(&mut self, sh: &Shared, w: usize) -> std::io::Result<()> {
        let end = if crate::coop::enabled() {
            self.safe.min(self.wbuf.len())
        } else {
            self.wbuf.len()
        };
        while self.wpos < end {
            match self.sock.write(&self.wbuf[self.wpos..end]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wpos += n;
                    sh.workers[w].add(C::bytes_written, n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wpos < self.wbuf.len() {
            return Ok(()); // the rest waits for its commit
        }
        self.wbuf.clear();
        self.wpos = 0;
        self.keep = 0;
        self.safe = 0;
        if self.wbuf.capacity() > 1 << 20 {
            self.wbuf = Vec::new();
        }
        Ok(())
    }

    pub(super) fn drive(
        &mut self,
        sh: &Arc<Shared>,
        w: usize,
        limits: &Limits,
        tok: Token,
    ) -> Status {
        let mut reads = 0;
        loop {
            let yielded = self.process(sh, w, limits, tok);
            // process stops at WBUF_HIGH with requests still to execute; once the flush below has
            // made room they are executed before anything is read: no event would come for them
            // if the socket took the whole backlog (no WouldBlock, no writable edge later)
            let stopped_full = self.backlog() >= WBUF_HIGH && self.rstart < self.rend;
            if self.dropping {
                self.commit_now(sh, w);
                let _ = self.flush(sh, w);
                return Status::Close;
            }
            self.take_watch();
            if self.flush(sh, w).is_err() {
                return Status::Close;
            }
            // lines logged while the earlier ones were being written
            if self.take_watch() && self.flush(sh, w).is_err() {
                return Status::Close;
            }
            if self.parked {
                // Parked on flash reads: the ticket wakes us.
                return Status::Idle;
            }
            if yielded {
                return Status::More;
            }
            if self.closing {
                return if self.backlog() == 0 {
                    Status::Close
                } else {
                    Status::Idle
                };
            }
            if self.backlog() >= WBUF_HIGH {
                // The peer is not reading: wait until the socket is writable again.
                return Status::Idle;
            }
            if reads == READS_PER_TURN {
                return Status::More;
            }
            reads += 1;
            if stopped_full {
                continue;
            }
            // Make room: compact, then grow if a request needs more than the buffer holds.
            if self.rstart > 0
                && (self.rend == self.rbuf.len() || self.rstart > self.rbuf.len() / 2)
            {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.rbuf.len() - self.rend < READ_CHUNK / 4 {
                let grow = (self.rbuf.len()).max(READ_CHUNK);
                self.rbuf.resize(self.rbuf.len() + grow, 0);
            }
            match self.sock.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    // the peer is done sending: what it was answered still goes out
                    self.close_reason = crate::watch::CloseReason::Normal;
                    self.commit_now(sh, w);
                    let _ = self.flush(sh, w);
                    return Status::Close;
                }
                Ok(n) => {
                    self.rend += n;
                    self.paused = false;
                    sh.workers[w].add(C::bytes_read, n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Status::Idle,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Status::Close,
            }
        }
    }
}

pub(super) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    pub(super) fn accept(&self) -> std::io::Result<(Stream, String, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let _ = s.set_nodelay(true);
                let local = s.local_addr().ok();
                Ok((
                    Stream::Tcp(s),
                    addr_text(Some(peer), false, None),
                    addr_text(local, false, None),
                ))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                let path = s
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                    .unwrap_or_default();
                let a = addr_text(None, false, Some(&path));
                Ok((Stream::Unix(s), a.clone(), a))
            }
        }
    }
}
