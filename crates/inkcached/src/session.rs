//! One connection's (or datagram's) protocol state: which protocol it speaks (decided by the
//! listener's `-B`, or by the first byte with `auto`, as memcached negotiates), whether it still
//! has to authenticate (`-Y`), and one request step at a time over its read buffer.

use crate::auth;
use crate::binexec;
use crate::config::Proto;
use crate::exec::{self, Ctx, Next, Shared};
use inkproto::binary::REQ_MAGIC;
use inkproto::request::{parse_request_with, Limits};
use std::sync::Arc;

pub struct Session {
    pub proto: Proto,
    pub auth: auth::State,
    pub ctx: Ctx,
    /// Where this read's first authentication answer starts in the output: memcached answers
    /// an unauthenticated connection once per read, with the last command's answer.
    pub auth_mark: Option<usize>,
}

/// What one step did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The buffer holds no complete request.
    NeedMore,
    /// `used` bytes were consumed, then `swallow` more are to be dropped from the stream.
    Done {
        used: usize,
        swallow: usize,
        next: Next,
    },
}

impl Session {
    /// A TCP or unix connection accepted on a listener speaking `proto`.
    pub fn new(sh: &Shared, proto: Proto, id: usize) -> Self {
        let auth = if sh.cfg.auth_file.is_some() && proto == Proto::Ascii {
            auth::State::Line
        } else {
            auth::State::Done
        };
        Session {
            proto,
            auth,
            ctx: Ctx {
                id,
                ..Default::default()
            },
            auth_mark: None,
        }
    }

    /// A UDP datagram: its protocol is its first byte's (for every request in it).
    pub fn udp() -> Self {
        Session {
            proto: Proto::Auto,
            auth: auth::State::Done,
            ctx: Ctx::default(),
            auth_mark: None,
        }
    }

    /// Executes the request at the start of `buf`, appending its answer to `out`.
    pub fn step(
        &mut self,
        sh: &Arc<Shared>,
        w: usize,
        limits: &Limits,
        buf: &[u8],
        out: &mut Vec<u8>,
    ) -> Step {
        if buf.is_empty() {
            return Step::NeedMore;
        }
        crate::watch::set_current_fd(self.ctx.id as i32);
        if self.auth != auth::State::Done {
            match self.auth_mark {
                Some(m) => out.truncate(m),
                None => self.auth_mark = Some(out.len()),
            }
            return match auth::step(sh, &sh.workers[w], &mut self.auth, buf, out) {
                None => Step::Done {
                    used: buf.len(),
                    swallow: 0,
                    next: Next::Drop,
                },
                Some(0) => Step::NeedMore,
                Some(used) => Step::Done {
                    used,
                    swallow: 0,
                    next: Next::Continue,
                },
            };
        }
        if self.proto == Proto::Auto {
            self.proto = if buf[0] == REQ_MAGIC {
                Proto::Binary
            } else {
                Proto::Ascii
            };
        }
        if self.proto == Proto::Binary {
            let note = crate::coop::note_binary(buf);
            return match binexec::step(sh, w, limits, buf, out) {
                binexec::Step::NeedMore => Step::NeedMore,
                binexec::Step::Done {
                    used,
                    swallow,
                    next,
                } => {
                    crate::coop::apply(sh, w, note);
                    Step::Done {
                        used,
                        swallow,
                        next,
                    }
                }
            };
        }
        match parse_request_with(buf, limits) {
            Ok(Some((req, used))) => {
                // cooperative mode: what the kernel cache needs once it is executed (coop.rs)
                let note = crate::coop::note(&req);
                let next = exec::execute(sh, w, &mut self.ctx, req, out);
                crate::coop::apply(sh, w, note);
                Step::Done {
                    used,
                    swallow: 0,
                    next,
                }
            }
            Ok(None) => Step::NeedMore,
            Err(e) => {
                if e.close {
                    return Step::Done {
                        used: buf.len(),
                        swallow: 0,
                        next: Next::Drop,
                    };
                }
                exec::parse_error(sh, w, buf, &e, out);
                crate::coop::parse_error(sh, w, buf, &e);
                Step::Done {
                    used: e.consumed,
                    swallow: e.swallow,
                    next: Next::Continue,
                }
            }
        }
    }
}
