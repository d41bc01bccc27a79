//! How the XDP program writes a reply into its frame (`attach --reply-write`): one helper call,
//! or inline stores where the kernel makes every helper's return dear.

/// How the XDP program writes a reply into the frame (bpf/config.h's reply_inline). Which is
/// cheaper depends on what a helper's return costs (docs/results/hitcost.md, twenty-first run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplyWrite {
    /// Inline where the kernel returns from every function through a thunk (the mitigations
    /// /sys/devices/system/cpu/vulnerabilities names: AMD's Safe RET or untrained return thunk),
    /// with the helper otherwise.
    Auto,
    /// One bpf_xdp_store_bytes call (its memcpy).
    Helper,
    /// 8-byte stores by direct packet access: no helper call.
    Inline,
}

impl ReplyWrite {
    /// Whether replies are written inline; `Auto` decided by this kernel's mitigations.
    pub fn inline(self) -> bool {
        match self {
            ReplyWrite::Helper => false,
            ReplyWrite::Inline => true,
            ReplyWrite::Auto => {
                let line = |f: &str| {
                    std::fs::read_to_string(format!("/sys/devices/system/cpu/vulnerabilities/{f}"))
                        .unwrap_or_default()
                };
                returns_through_thunk(&line("retbleed"), &line("spec_rstack_overflow"))
            }
        }
    }
}

/// Whether the kernel returns from every function through a thunk, by its retbleed and SRSO
/// lines (the kernel's own wording): then each helper call's return costs a misprediction.
pub fn returns_through_thunk(retbleed: &str, srso: &str) -> bool {
    retbleed.contains("return thunk") || srso.contains("Safe RET")
}

#[cfg(test)]
mod tests {
    use super::returns_through_thunk;

    #[test]
    fn a_return_thunk_is_told_by_the_kernels_wording() {
        // lines as the x86 kernel words them
        let thunk = [
            ("Mitigation: untrained return thunk; SMT vulnerable", ""),
            ("Not affected", "Mitigation: Safe RET"),
            ("Not affected", "Vulnerable: Safe RET, no microcode"),
        ];
        for (retbleed, srso) in thunk {
            assert!(returns_through_thunk(retbleed, srso), "{retbleed} / {srso}");
        }
        let none = [
            ("Not affected", "Not affected"),
            ("Mitigation: Enhanced / Automatic IBRS", "Not affected"),
            ("Mitigation: IBRS", ""),
            ("Mitigation: IBPB", "Mitigation: IBPB"),
            ("Not affected", "Vulnerable: Microcode, no safe RET"),
            ("", ""),
        ];
        for (retbleed, srso) in none {
            assert!(
                !returns_through_thunk(retbleed, srso),
                "{retbleed} / {srso}"
            );
        }
    }
}
