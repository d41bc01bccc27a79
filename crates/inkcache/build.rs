//! Compiles every `bpf/*.bpf.c` into a libbpf skeleton (`$OUT_DIR/<name>.skel.rs`), and generates
//! `$OUT_DIR/abi.rs` (constants and counters) from `bpf/inkcache_common.h` by building and running
//! `src/abi_gen.c` on the host.
use std::{env, path::PathBuf, process::Command};

use libbpf_cargo::SkeletonBuilder;

/// Objects compiled for eBPF ISA v3 (32-bit jumps and arithmetic: about 10% fewer instructions):
/// the XDP program, whose every instruction is on a kernel hit's path (issue 11). The others keep
/// clang's default ISA: with v3 the verifier walks more of their paths and refuses three of them
/// at its 1M-instruction limit. scripts/verifier-report.sh builds with the same flags.
const ISA_V3: &[&str] = &["inkcache_xdp"];

/// The clang the objects are built with: `$INKCACHE_CLANG` if set, else `clang-14` where
/// installed, else `clang` if it is clang 14 (Debian 12's). The code's shape (how loops are
/// bounded, which values go through map memory) is fitted to what clang 14 emits and what the
/// verifier can follow: newer clangs' objects are refused at its 1M-instruction budget (clang
/// 15 and 16: inkcache_answers; clang 19: inkcache_xdp, inkcache_answers and inkcache_requests;
/// docs/results/hitcost.md, thirty-fourth run). So another version stops the build here, saying
/// so, rather than at attach; INKCACHE_CLANG names one anyway, to try it.
fn clang() -> PathBuf {
    println!("cargo:rerun-if-env-changed=INKCACHE_CLANG");
    if let Some(c) = env::var_os("INKCACHE_CLANG") {
        return PathBuf::from(c);
    }
    if clang_major("clang-14") == Some(14) {
        return PathBuf::from("clang-14");
    }
    match clang_major("clang") {
        Some(14) => PathBuf::from("clang"),
        Some(v) => panic!(
            "inkcache's eBPF objects need clang 14 (Debian 12's): clang {v}'s are refused by the \
             verifier (docs/results/hitcost.md, thirty-fourth run); install clang-14, or set \
             INKCACHE_CLANG to try another"
        ),
        None => panic!("clang 14 is missing (make deps installs it)"),
    }
}

/// The major version `clang --version` prints ("Debian clang version 14.0.6"), if it runs.
fn clang_major(clang: &str) -> Option<u32> {
    let out = Command::new(clang).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.split("clang version ").nth(1)?;
    v.split('.').next()?.trim().parse().ok()
}

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
    // the iterators (and only they) are built against the running kernel's BTF
    let vmlinux = out.join("vmlinux");
    std::fs::create_dir_all(&vmlinux).unwrap();
    let btf = Command::new("bpftool")
        .args([
            "btf",
            "dump",
            "file",
            "/sys/kernel/btf/vmlinux",
            "format",
            "c",
        ])
        .output()
        .expect("running bpftool (make deps installs it) for vmlinux.h");
    assert!(
        btf.status.success(),
        "bpftool btf dump failed: {}",
        String::from_utf8_lossy(&btf.stderr)
    );
    std::fs::write(vmlinux.join("vmlinux.h"), btf.stdout).unwrap();
    let clang = clang();
    for name in &names {
        let src = root.join(format!("{name}.bpf.c"));
        let mut args = vec![
            format!("-I/usr/include/{arch}"),
            format!("-I{}", root.display()),
            format!("-I{}", vmlinux.display()),
            "-Wall".to_string(),
            "-Werror".to_string(),
        ];
        if ISA_V3.contains(&name.as_str()) {
            args.push("-mcpu=v3".to_string());
        }
        SkeletonBuilder::new()
            .source(&src)
            .clang(&clang)
            .clang_args(args)
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
    generate_abi(&root, &out, arch);
    println!("cargo:rerun-if-changed={}", root.display());
    for entry in std::fs::read_dir(&root).unwrap() {
        println!("cargo:rerun-if-changed={}", entry.unwrap().path().display());
    }
}

/// Builds src/abi_gen.c with the host C compiler (`$CC`, else `cc`) against the shared header and
/// writes what it prints to `$OUT_DIR/abi.rs`.
fn generate_abi(root: &std::path::Path, out: &std::path::Path, arch: &str) {
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/abi_gen.c");
    let exe = out.join("abi_gen");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg(format!("-I/usr/include/{arch}"))
        .arg(format!("-I{}", root.display()))
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("running {cc} for {}: {e}", src.display()));
    assert!(status.success(), "building {} failed", src.display());
    let gen = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    assert!(gen.status.success(), "{} failed", exe.display());
    std::fs::write(out.join("abi.rs"), gen.stdout).expect("writing abi.rs");
    println!("cargo:rerun-if-changed={}", src.display());
}
