//! roughnet-wire: the userspace link emulator binary (not yet built).
fn main() {
    eprintln!("roughnet-wire: not implemented yet");
    std::process::exit(1);
}
