//! Errors the CLI reports as one line.
use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("must run as root (needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("no such interface: {0}")]
    NoSuchInterface(String),
    #[error("inkcache is already attached to {0} (run `inkcache detach --iface {0}` first)")]
    AlreadyAttached(String),
    #[error("inkcache is not attached to {0}")]
    NotAttached(String),
    #[error("{iface} already has an XDP program (id {id}); inkcache does not replace it")]
    XdpBusy { iface: String, id: u32 },
    #[error("kernel lacks {0}")]
    KernelLacks(String),
    #[error("{0}")]
    Usage(String),
}
