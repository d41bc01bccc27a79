//! Compiles every `bpf/lab/*.bpf.c` (the echo floor and pass programs of the benchmark
//! topologies) into a libbpf skeleton, `$OUT_DIR/<name>.skel.rs`. The control plane
//! (crates/inkcache) builds only the kernel cache's own programs.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let lab = root.join("lab");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    // UAPI headers (asm/types.h) live in the multiarch include directory on Debian.
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => panic!("unsupported target architecture {other}"),
    };
    println!("cargo:rerun-if-changed={}", lab.display());
    for entry in std::fs::read_dir(&lab).unwrap() {
        let src = entry.unwrap().path();
        println!("cargo:rerun-if-changed={}", src.display());
        let Some(name) = src
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_suffix(".bpf.c"))
            .map(str::to_string)
        else {
            continue;
        };
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                format!("-I/usr/include/{arch}"),
                format!("-I{}", root.display()),
                "-Wall".to_string(),
                "-Werror".to_string(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
}
