//! roughnet-wire-core: the impairment pipeline of the userspace link emulator (no I/O, no clock).
