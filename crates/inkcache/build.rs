//! Compiles every `bpf/*.bpf.c` into a libbpf skeleton (`$OUT_DIR/<name>.skel.rs`).
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    // UAPI headers (asm/types.h) live in the multiarch include directory on Debian.
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => panic!("unsupported target architecture {other}"),
    };
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| {
            let f = e.unwrap().file_name().into_string().ok()?;
            f.strip_suffix(".bpf.c").map(str::to_string)
        })
        .collect();
    names.sort();
    for name in &names {
        let src = root.join(format!("{name}.bpf.c"));
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
    println!("cargo:rerun-if-changed={}", root.display());
    for entry in std::fs::read_dir(&root).unwrap() {
        println!("cargo:rerun-if-changed={}", entry.unwrap().path().display());
    }
}
