//! Compiles `bpf/sg/*.bpf.c` into libbpf skeletons (`$OUT_DIR/<name>.skel.rs`); the objects stay
//! in `$OUT_DIR/<name>.bpf.o` too (the example aggregation program is loaded as a plain object).
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf/sg");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => panic!("unsupported target architecture {other}"),
    };
    for name in ["sg", "sg_worker", "sg_argmax"] {
        let src = root.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
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
