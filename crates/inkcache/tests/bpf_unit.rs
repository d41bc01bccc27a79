//! eBPF unit tests on BPF_PROG_TEST_RUN: hundreds of packet-level cases in seconds, no namespaces
//! (tests/unit/). The end-to-end tests with real memcached are the other files of this directory.
mod unit;
