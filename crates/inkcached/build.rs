//! Compiles inkcached's own eBPF programs (`bpf/inkcached/*.bpf.c`: the AF_XDP / cpumap XDP
//! program and the sk_reuseport steering program) into libbpf skeletons in `$OUT_DIR`.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let bpf = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let dir = bpf.join("inkcached");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => panic!("unsupported target architecture {other}"),
    };
    for name in ["inkcached_xdp", "inkcached_steer"] {
        let src = dir.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                format!("-I/usr/include/{arch}"),
                format!("-I{}", bpf.display()),
                "-Wall".to_string(),
                "-Werror".to_string(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
    for d in [&dir, &bpf] {
        println!("cargo:rerun-if-changed={}", d.display());
        for entry in std::fs::read_dir(d).unwrap() {
            println!("cargo:rerun-if-changed={}", entry.unwrap().path().display());
        }
    }
}
