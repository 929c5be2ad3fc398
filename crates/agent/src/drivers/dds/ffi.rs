//! Safe owners of the Cyclone DDS C entities the `dds` driver uses: a domain
//! with its participant and topic type, QoS objects, writers, readers (each with
//! a read condition in a waitset, and TAKE_BATCH reusable samples whose buffers
//! Cyclone fills in place, taken TAKE_BATCH at a time), and waitsets over several
//! readers.  Every `unsafe` C call of
//! the driver is here.

use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Mutex;

use cyclors::*;

use super::QosSpec;
use crate::clock::now_ns;
use crate::drivers::DriverError;
use crate::message::{HEADER_LEN, MAGIC};
use crate::signals::stop_requested;

/// DDS_ANY_STATE (sample | view | instance states).
const ANY_STATE: u32 = 0x7f;
/// DDS_RETCODE_TIMEOUT.
const RET_TIMEOUT: i32 = -10;
/// Samples a reader takes per `dds_take` call (then hands out one by one): one lock of the
/// reader's history and one entity pin per batch instead of per sample, as ddsperf's subscriber
/// does (it takes up to its `max_samples` at once).
const TAKE_BATCH: usize = 32;
/// Initial buffer of each reusable sample; Cyclone reallocates one that is too small (malloc).
const SAMPLE_INITIAL_BYTES: usize = 64 * 1024;
/// A writer blocked on a full history re-checks signals and the run's give-up time this often.
const MAX_BLOCKING_NS: i64 = 50_000_000;
/// DDS_OP_ADR | DDS_OP_TYPE_SEQ | DDS_OP_SUBTYPE_1BY (a `sequence<octet>`), DDS_OP_ADR | DDS_OP_TYPE_4BY.
const OP_OCTET_SEQ: u32 = 0x0100_0000 | (0x07 << 16) | (0x01 << 8);
const OP_U32: u32 = 0x0100_0000 | (0x03 << 16);
/// Offset of `Sample::data`.
const DATA_OFFSET: u32 = std::mem::offset_of!(Sample, data) as u32;
/// Marshalling ops of `struct Bytes { sequence<octet> data; }`: `data` only, then DDS_OP_RTS.
static OPS: [u32; 3] = [OP_OCTET_SEQ, DATA_OFFSET, 0];
/// ROS 2 mode, `std_msgs/msg/UInt8MultiArray` (`MultiArrayLayout layout; uint8[] data`) with an
/// empty layout: `layout.dim`'s length (a `sequence<MultiArrayDimension>`, always 0 here, so one u32
/// on the wire), `layout.data_offset`, `data`.  A peer's array with dimensions does not decode into
/// this (its data then fails the header check: `bad_messages`).
static OPS_ROS2: [u32; 7] = [OP_U32, 0, OP_U32, 4, OP_OCTET_SEQ, DATA_OFFSET, 0];

/// DDS_OP_ADR | DDS_OP_TYPE_ARR | DDS_OP_SUBTYPE_1BY (an `octet[n]`), DDS_OP_ADR | DDS_OP_TYPE_STR,
/// DDS_OP_ADR | DDS_OP_TYPE_SEQ | DDS_OP_SUBTYPE_STU (a sequence of structs), DDS_OP_RTS.
const OP_OCTET_ARR: u32 = 0x0100_0000 | (0x08 << 16) | (0x01 << 8);
const OP_STR: u32 = 0x0100_0000 | (0x05 << 16);
const OP_STRUCT_SEQ: u32 = 0x0100_0000 | (0x07 << 16) | (0x0a << 8);
const OP_RTS: u32 = 0;
/// The DDS type of ROS 2's graph topic `ros_discovery_info`.
pub const PEI_TYPE: &str = "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_";
pub const PEI_TOPIC: &str = "ros_discovery_info";
/// Marshalling ops of `rmw_dds_common/msg/ParticipantEntitiesInfo` (Kilted: `Gid` is `char[16] data`):
/// `Gid gid; NodeEntitiesInfo[] node_entities_info_seq` with `NodeEntitiesInfo` = `string node_namespace;
/// string node_name; Gid[] reader_gid_seq; Gid[] writer_gid_seq` (final types: plain XCDR1, the bounded
/// strings are on the wire as unbounded ones).  A sequence's element ops follow it inline, its
/// `[next-insn, elem-insn]` word skipping them (dds_opcodes.h).
static OPS_PEI: [u32; 29] = [
    OP_OCTET_ARR,
    std::mem::offset_of!(PeiSample, gid) as u32,
    16,
    OP_STRUCT_SEQ,
    std::mem::offset_of!(PeiSample, nodes) as u32,
    std::mem::size_of::<NodeSample>() as u32,
    (25 << 16) | 4,
    OP_STR,
    std::mem::offset_of!(NodeSample, namespace) as u32,
    OP_STR,
    std::mem::offset_of!(NodeSample, name) as u32,
    OP_STRUCT_SEQ,
    std::mem::offset_of!(NodeSample, readers) as u32,
    16,
    (8 << 16) | 4,
    OP_OCTET_ARR,
    0,
    16,
    OP_RTS,
    OP_STRUCT_SEQ,
    std::mem::offset_of!(NodeSample, writers) as u32,
    16,
    (8 << 16) | 4,
    OP_OCTET_ARR,
    0,
    16,
    OP_RTS,
    OP_RTS,
    OP_RTS,
]; // fmt: skip

/// The C layout of a generic sequence (dds_sequence_t).
#[repr(C)]
struct AnySeq {
    maximum: u32,
    length: u32,
    buffer: *mut c_void,
    release: bool,
}

impl AnySeq {
    /// A sequence over `v` (borrowed: Cyclone only reads it when writing).
    fn over<T>(v: &[T]) -> AnySeq {
        AnySeq {
            maximum: v.len() as u32,
            length: v.len() as u32,
            buffer: v.as_ptr() as *mut c_void,
            release: false,
        }
    }
}

#[repr(C)]
struct NodeSample {
    namespace: *const std::ffi::c_char,
    name: *const std::ffi::c_char,
    readers: AnySeq,
    writers: AnySeq,
}

#[repr(C)]
struct PeiSample {
    gid: [u8; 16],
    nodes: AnySeq,
}

/// The C layout of `sequence<octet>` (dds_sequence_t).
#[repr(C)]
struct OctetSeq {
    maximum: u32,
    length: u32,
    buffer: *mut u8,
    release: bool,
}

/// The C layout of a sample of either type: the two u32 are marshalled only in ROS 2 mode
/// (`OPS_ROS2`) and always written as 0.
#[repr(C)]
struct Sample {
    dims: u32,
    data_offset: u32,
    data: OctetSeq,
}

impl Sample {
    fn new(maximum: u32, buffer: *mut u8, release: bool) -> Sample {
        Sample {
            dims: 0,
            data_offset: 0,
            data: OctetSeq {
                maximum,
                length: 0,
                buffer,
                release,
            },
        }
    }
}

fn err(what: impl Into<String>, rc: i32) -> DriverError {
    // SAFETY: dds_strretcode returns a static string for any code.
    let text = unsafe {
        let p = dds_strretcode(rc);
        if p.is_null() {
            format!("code {rc}")
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    DriverError::Protocol {
        addr: what.into(),
        msg: format!("Cyclone DDS: {text}"),
    }
}

fn check(what: &str, rc: i32) -> Result<i32, DriverError> {
    if rc < 0 {
        Err(err(what, rc))
    } else {
        Ok(rc)
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NULs removed")
}

/// One DDS domain (configured from XML) with one participant and the Bytes type (ROS 2 mode:
/// `std_msgs/msg/UInt8MultiArray`).
pub struct Domain {
    domain: dds_entity_t,
    participant: dds_entity_t,
    descriptor: Box<dds_topic_descriptor_t>,
    _type_name: CString,
    /// ROS 2 mode: the node this participant presents to the ROS graph.
    graph: Option<Graph>,
    /// ROS 2 mode: the request and reply types of roughnet_msgs/srv/Bytes (`rq/` and `rr/` topics).
    service: Option<[(CString, Box<dds_topic_descriptor_t>); 2]>,
}

/// roughnet_msgs/srv/Bytes (python/roughnet/ros2/typegen.py): its request and response types on DDS and
/// their type hashes (the generated Bytes_Request.json / Bytes_Response.json).  Each is one
/// `sequence<octet> data`: the marshalling of `roughnet::Bytes`.
pub const SERVICE_TYPES: [(&str, &str); 2] = [
    (
        "roughnet_msgs::srv::dds_::Bytes_Request_",
        "RIHS01_e37f1378e0649f9d38b1433db6ce6075a78051c6e52dd85b51db357886356166",
    ),
    (
        "roughnet_msgs::srv::dds_::Bytes_Response_",
        "RIHS01_e78fd3a5892a11369ebcddbecb687cdb3e9fc9c7698feaecd803f444681b983e",
    ),
];

/// 0: a service's request topic (`rq/`), 1: its reply topic (`rr/`), None: a topic.
fn service_side(topic: &str) -> Option<usize> {
    if topic.starts_with("rq/") {
        Some(0)
    } else if topic.starts_with("rr/") {
        Some(1)
    } else {
        None
    }
}

/// A ROS 2 node as ROS's graph sees one (rmw_dds_common): the participant's `ros_discovery_info`
/// sample lists the node and the GUIDs of its readers and writers, and every endpoint carries its
/// type's hash in its user_data.
pub struct RosNode {
    pub namespace: String,
    pub name: String,
    /// `RIHS01_<hex>` of the data type (std_msgs/msg/UInt8MultiArray).
    pub type_hash: &'static str,
}

struct Graph {
    namespace: CString,
    name: CString,
    /// `typehash=RIHS01_<hex>;`: the endpoints' user_data as rmw (Kilted) writes it.
    user_data: String,
    readers: Mutex<Vec<[u8; 16]>>,
    writers: Mutex<Vec<[u8; 16]>>,
    pei_descriptor: Box<dds_topic_descriptor_t>,
    /// Also serialises announcements (host mode: several flows' threads share the participant).
    pei_writer: Mutex<dds_entity_t>,
    _pei_type: CString,
}

/// `rmw_dds_common/msg/ParticipantEntitiesInfo`'s type hash (the wheel's share/rmw_dds_common/msg/*.json).
pub const PEI_TYPE_HASH: &str =
    "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e";

fn make_descriptor(
    size: usize,
    align: usize,
    type_name: &CString,
    ops: &'static [u32],
) -> Box<dds_topic_descriptor_t> {
    Box::new(dds_topic_descriptor_t {
        m_size: size as u32,
        m_align: align as u32,
        m_flagset: 0,
        m_nkeys: 0,
        m_typename: type_name.as_ptr(),
        m_keys: ptr::null(),
        m_nops: ops.len() as u32,
        m_ops: ops.as_ptr(),
        m_meta: c"".as_ptr(),
        // No XTypes type information: peers match on the type name.
        // SAFETY: all-zero is "none" for both.
        type_information: unsafe { std::mem::zeroed() },
        type_mapping: unsafe { std::mem::zeroed() },
        restrict_data_representation: 0,
    })
}

impl Domain {
    pub fn new(
        id: u32,
        xml: &str,
        type_name: &str,
        ros2: Option<RosNode>,
    ) -> Result<Domain, DriverError> {
        let ops: &'static [u32] = if ros2.is_some() { &OPS_ROS2 } else { &OPS };
        let cxml = cstring(xml);
        let tn = cstring(type_name);
        // SAFETY: valid C strings; entities are checked.
        unsafe {
            let domain = check("dds_create_domain", dds_create_domain(id, cxml.as_ptr()))?;
            // ROS 2 participants say which security enclave they are in (rmw: `enclave=/;`).
            let pq = dds_create_qos();
            if ros2.is_some() {
                let ud = b"enclave=/;";
                dds_qset_userdata(pq, ud.as_ptr() as *const c_void, ud.len());
            }
            let participant = dds_create_participant(id, pq, ptr::null());
            dds_delete_qos(pq);
            if participant < 0 {
                dds_delete(domain);
                return Err(err("dds_create_participant", participant));
            }
            let descriptor = make_descriptor(
                std::mem::size_of::<Sample>(),
                std::mem::align_of::<Sample>(),
                &tn,
                ops,
            );
            let service = ros2.is_some().then(|| {
                SERVICE_TYPES.map(|(name, _)| {
                    let n = cstring(name);
                    let d = make_descriptor(
                        std::mem::size_of::<Sample>(),
                        std::mem::align_of::<Sample>(),
                        &n,
                        &OPS,
                    );
                    (n, d)
                })
            });
            let graph = ros2.map(|n| {
                let pei_type = cstring(PEI_TYPE);
                Graph {
                    namespace: cstring(&n.namespace),
                    name: cstring(&n.name),
                    user_data: format!("typehash={};", n.type_hash),
                    readers: Mutex::new(Vec::new()),
                    writers: Mutex::new(Vec::new()),
                    pei_descriptor: make_descriptor(
                        std::mem::size_of::<PeiSample>(),
                        std::mem::align_of::<PeiSample>(),
                        &pei_type,
                        &OPS_PEI,
                    ),
                    pei_writer: Mutex::new(0),
                    _pei_type: pei_type,
                }
            });
            Ok(Domain {
                domain,
                participant,
                descriptor,
                _type_name: tn,
                graph,
                service,
            })
        }
    }

    /// ROS 2 mode: publish (again) this participant's node and its endpoints on `ros_discovery_info`
    /// (reliable, transient local, keep last 1, as rmw_dds_common's graph cache reads it), so that
    /// ROS tools list the node and tie the endpoints to it.  Nothing outside ROS 2 mode.
    pub fn announce_node(&self) -> Result<(), DriverError> {
        let Some(g) = &self.graph else {
            return Ok(());
        };
        // SAFETY: live participant; the descriptor lives as long as the domain; the sample borrows
        // vectors and strings alive during the write.
        unsafe {
            let mut pei_writer = g.pei_writer.lock().unwrap_or_else(|p| p.into_inner());
            if *pei_writer == 0 {
                let cname = cstring(PEI_TOPIC);
                let t = check(
                    PEI_TOPIC,
                    dds_create_topic(
                        self.participant,
                        &*g.pei_descriptor,
                        cname.as_ptr(),
                        ptr::null(),
                        ptr::null(),
                    ),
                )?;
                let q = dds_create_qos();
                dds_qset_reliability(
                    q,
                    dds_reliability_kind_DDS_RELIABILITY_RELIABLE,
                    MAX_BLOCKING_NS,
                );
                dds_qset_history(q, dds_history_kind_DDS_HISTORY_KEEP_LAST, 1);
                dds_qset_durability(q, dds_durability_kind_DDS_DURABILITY_TRANSIENT_LOCAL);
                let ud = format!("typehash={PEI_TYPE_HASH};");
                dds_qset_userdata(q, ud.as_ptr() as *const c_void, ud.len());
                let w = dds_create_writer(self.participant, t, q, ptr::null());
                dds_delete_qos(q);
                *pei_writer = check(PEI_TOPIC, w)?;
            }
            let mut gid: dds_guid_t = std::mem::zeroed();
            check(PEI_TOPIC, dds_get_guid(self.participant, &mut gid))?;
            let readers = g.readers.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let writers = g.writers.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let node = [NodeSample {
                namespace: g.namespace.as_ptr(),
                name: g.name.as_ptr(),
                readers: AnySeq::over(&readers),
                writers: AnySeq::over(&writers),
            }];
            let sample = PeiSample {
                gid: gid.v,
                nodes: AnySeq::over(&node),
            };
            check(
                PEI_TOPIC,
                dds_write(*pei_writer, &sample as *const PeiSample as *const c_void),
            )?;
        }
        Ok(())
    }

    /// The QoS an endpoint is created with: `qos`, in ROS 2 mode with the type hash as user_data.
    /// The caller deletes the returned copy.
    ///
    /// # Safety
    /// `qos.q` is live.
    unsafe fn endpoint_qos(&self, qos: &Qos, topic: &str) -> *mut dds_qos_t {
        let q = dds_create_qos();
        dds_copy_qos(q, qos.q);
        if let Some(g) = &self.graph {
            let ud = match service_side(topic) {
                Some(i) => format!("typehash={};", SERVICE_TYPES[i].1),
                None => g.user_data.clone(),
            };
            dds_qset_userdata(q, ud.as_ptr() as *const c_void, ud.len());
        }
        q
    }

    fn register(&self, entity: dds_entity_t, writer: bool) {
        if let Some(g) = &self.graph {
            let mut gid: dds_guid_t = unsafe { std::mem::zeroed() };
            // SAFETY: live entity, out-parameter of the right type.
            if unsafe { dds_get_guid(entity, &mut gid) } >= 0 {
                if writer { &g.writers } else { &g.readers }
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(gid.v);
            }
        }
    }

    fn topic(&self, name: &str) -> Result<dds_entity_t, DriverError> {
        let cname = cstring(name);
        let desc = match (&self.service, service_side(name)) {
            (Some(types), Some(i)) => &*types[i].1,
            _ => &*self.descriptor,
        };
        // SAFETY: the descriptor outlives the participant (deleted in Drop first).
        unsafe {
            check(
                name,
                dds_create_topic(
                    self.participant,
                    desc,
                    cname.as_ptr(),
                    ptr::null(),
                    ptr::null(),
                ),
            )
        }
    }

    pub fn writer(&self, topic: &str, qos: &Qos) -> Result<Writer, DriverError> {
        let t = self.topic(topic)?;
        // SAFETY: live participant/topic/qos.
        let w = unsafe {
            let q = self.endpoint_qos(qos, topic);
            let w = dds_create_writer(self.participant, t, q, ptr::null());
            dds_delete_qos(q);
            w
        };
        let w = check(topic, w)?;
        self.register(w, true);
        // SAFETY: plain clock reads.
        let realtime_minus_monotonic = unsafe { dds_time() } - now_ns() as i64;
        Ok(Writer {
            w,
            batching: qos.batching,
            stamp_from_header: false,
            realtime_minus_monotonic,
            topic: topic.into(),
            sample: Sample::new(0, ptr::null_mut(), false),
        })
    }

    /// A reader whose reusable samples start with buffers of up to `capacity` bytes (Cyclone
    /// enlarges one that a larger message needs).
    pub fn reader(&self, topic: &str, qos: &Qos, capacity: usize) -> Result<Reader, DriverError> {
        let t = self.topic(topic)?;
        // SAFETY: live entities; the buffers come from malloc so Cyclone may realloc/free them.
        unsafe {
            let q = self.endpoint_qos(qos, topic);
            let r = dds_create_reader(self.participant, t, q, ptr::null());
            dds_delete_qos(q);
            let r = check(topic, r)?;
            self.register(r, false);
            let rc = check(topic, dds_create_readcondition(r, ANY_STATE))?;
            let ws = check(topic, dds_create_waitset(self.participant))?;
            check(topic, dds_waitset_attach(ws, rc, r as dds_attach_t))?;
            let cap = capacity.clamp(64, SAMPLE_INITIAL_BYTES);
            let mut samples = Vec::with_capacity(TAKE_BATCH);
            for _ in 0..TAKE_BATCH {
                let buffer = libc::malloc(cap) as *mut u8;
                if buffer.is_null() {
                    free_samples(&mut samples);
                    dds_delete(ws);
                    dds_delete(r);
                    return Err(DriverError::Protocol {
                        addr: topic.into(),
                        msg: format!("cannot allocate a {cap}-byte sample"),
                    });
                }
                samples.push(Sample::new(cap as u32, buffer, true));
            }
            let mut samples = samples.into_boxed_slice();
            let ptrs = samples
                .iter_mut()
                .map(|s| s as *mut Sample as *mut c_void)
                .collect::<Vec<_>>()
                .into_boxed_slice();
            Ok(Reader {
                r,
                cond: rc,
                ws,
                topic: topic.into(),
                samples,
                ptrs,
                infos: vec![std::mem::zeroed(); TAKE_BATCH].into_boxed_slice(),
                taken: 0,
                next: 0,
                seen_total: Cell::new(u32::MAX),
                seen_current: Cell::new(u32::MAX),
            })
        }
    }

    /// One waitset over the read conditions of several readers.
    pub fn waitset(&self, readers: &[Reader]) -> Result<WaitSet, DriverError> {
        // SAFETY: live entities.
        unsafe {
            let ws = check("dds_create_waitset", dds_create_waitset(self.participant))?;
            for r in readers {
                check(
                    &r.topic,
                    dds_waitset_attach(ws, r.cond, r.r as dds_attach_t),
                )?;
            }
            Ok(WaitSet(ws))
        }
    }
}

// SAFETY: Cyclone's API is thread-safe (entities are handles into the library, which locks); the
// descriptors are read-only after creation and the ROS 2 graph's state is behind mutexes.  Host mode
// (crate::host) shares one Domain between the threads of several flows.
unsafe impl Send for Domain {}
unsafe impl Sync for Domain {}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: deleting a participant deletes its children; then the domain.
        unsafe {
            dds_delete(self.participant);
            dds_delete(self.domain);
        }
    }
}

pub struct Qos {
    q: *mut dds_qos_t,
    /// Writer batching is on (then writers must be flushed).
    batching: bool,
}

impl Qos {
    pub fn new(spec: &QosSpec) -> Qos {
        // SAFETY: a fresh qos object, set with valid kinds.
        unsafe {
            let q = dds_create_qos();
            dds_qset_reliability(
                q,
                if spec.reliable {
                    dds_reliability_kind_DDS_RELIABILITY_RELIABLE
                } else {
                    dds_reliability_kind_DDS_RELIABILITY_BEST_EFFORT
                },
                MAX_BLOCKING_NS,
            );
            let (kind, depth) = if spec.depth == 0 {
                (dds_history_kind_DDS_HISTORY_KEEP_ALL, 1)
            } else {
                (dds_history_kind_DDS_HISTORY_KEEP_LAST, spec.depth)
            };
            dds_qset_history(q, kind, depth);
            if spec.transient_local {
                dds_qset_durability(q, dds_durability_kind_DDS_DURABILITY_TRANSIENT_LOCAL);
                dds_qset_durability_service(q, 0, kind, depth, -1, -1, -1);
            } else {
                dds_qset_durability(q, dds_durability_kind_DDS_DURABILITY_VOLATILE);
            }
            // Readers ignore it; writers keep samples in their RTPS message until it is full
            // (General/MaxMessageSize) or flushed.
            dds_qset_writer_batching(q, spec.batching);
            Qos {
                q,
                batching: spec.batching,
            }
        }
    }
}

impl Drop for Qos {
    fn drop(&mut self) {
        // SAFETY: created by dds_create_qos.
        unsafe { dds_delete_qos(self.q) }
    }
}

pub struct Writer {
    w: dds_entity_t,
    batching: bool,
    /// Source timestamps from the messages' headers (senders, pingers: the header's actual send
    /// time is this write's); off, Cyclone reads the clock (a ponger's reply carries the ping's times).
    stamp_from_header: bool,
    /// Wall clock minus CLOCK_MONOTONIC (ns) when the writer was made: a message's source
    /// timestamp is its header's actual send time plus this, so a write reads no clock.
    realtime_minus_monotonic: i64,
    topic: String,
    sample: Sample,
}

impl Writer {
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Write one message (Cyclone serialises it from `msg`, no copy of ours).  A
    /// full reliable history blocks; we retry until `give_up_ns` or a signal.  A
    /// roughnet message's source timestamp is the actual send time in its header
    /// (on the wall clock), read just before by the pattern: `dds_write` would
    /// read the clock once more per sample (ddsperf likewise passes its own
    /// timestamps to `dds_write_ts`).
    #[inline]
    pub fn write(&mut self, msg: &[u8], give_up_ns: u64) -> Result<(), DriverError> {
        self.sample.data.buffer = msg.as_ptr() as *mut u8;
        self.sample.data.length = msg.len() as u32;
        self.sample.data.maximum = msg.len() as u32;
        self.sample.data.release = false;
        let ts = if self.stamp_from_header {
            header_actual_ns(msg).map(|t| t as i64 + self.realtime_minus_monotonic)
        } else {
            None
        };
        loop {
            let sample = &self.sample as *const Sample as *const c_void;
            // SAFETY: the sample points at `msg`, alive for the call; Cyclone only reads it.
            let rc = unsafe {
                match ts {
                    Some(t) => dds_write_ts(self.w, sample, t),
                    None => dds_write(self.w, sample),
                }
            };
            match rc {
                0.. => return Ok(()),
                RET_TIMEOUT => {
                    if stop_requested() {
                        return Err(DriverError::Interrupted);
                    }
                    if now_ns() >= give_up_ns {
                        return Err(DriverError::GaveUp {
                            what: format!("writing to {} (history full)", self.topic),
                            timeout_ms: 0,
                        });
                    }
                }
                _ => return Err(err(&self.topic, rc)),
            }
        }
    }

    /// Take each message's source timestamp from its header's actual send time (see `write`).
    pub fn stamp_from_header(mut self) -> Writer {
        self.stamp_from_header = true;
        self
    }

    /// Send what waits in the writer's batch now (nothing to do without batching).
    #[inline]
    pub fn flush(&mut self) -> Result<(), DriverError> {
        if self.batching {
            // SAFETY: live writer.
            check(&self.topic, unsafe { dds_write_flush(self.w) })?;
        }
        Ok(())
    }

    pub fn guid(&self) -> Result<[u8; 16], DriverError> {
        let mut g: dds_guid_t = unsafe { std::mem::zeroed() };
        // SAFETY: live writer, out-parameter of the right type.
        check(&self.topic, unsafe { dds_get_guid(self.w, &mut g) })?;
        Ok(g.v)
    }

    pub fn matched_count(&self) -> Result<u32, DriverError> {
        let mut s: dds_publication_matched_status_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        check(&self.topic, unsafe {
            dds_get_publication_matched_status(self.w, &mut s)
        })?;
        Ok(s.current_count)
    }

    pub fn wait_for_acks(&self, timeout_ns: i64) -> Result<(), DriverError> {
        // SAFETY: live writer.
        check(&self.topic, unsafe {
            dds_wait_for_acks(self.w, timeout_ns)
        })
        .map(|_| ())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: our entity (already gone if the domain went first: then an error code).
        unsafe { dds_delete(self.w) };
    }
}

/// The actual send time (CLOCK_MONOTONIC ns) in a roughnet message header, if `msg` has one.
#[inline]
fn header_actual_ns(msg: &[u8]) -> Option<u64> {
    if msg.len() < HEADER_LEN || msg[0..4] != MAGIC.to_le_bytes() {
        return None;
    }
    let t = u64::from_le_bytes(msg[24..32].try_into().expect("8 bytes"));
    (t > 0).then_some(t)
}

pub struct Reader {
    r: dds_entity_t,
    cond: dds_entity_t,
    ws: dds_entity_t,
    topic: String,
    /// TAKE_BATCH reusable samples (malloc'd buffers), `ptrs` pointing at each (what dds_take fills).
    samples: Box<[Sample]>,
    ptrs: Box<[*mut c_void]>,
    infos: Box<[dds_sample_info_t]>,
    /// Samples of the last dds_take, and the next one to hand out.
    taken: usize,
    next: usize,
    seen_total: Cell<u32>,
    seen_current: Cell<u32>,
}

impl Reader {
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Take one valid sample into `buf`: (length, publication handle), or None.  Samples
    /// come from Cyclone TAKE_BATCH at a time; the rest wait here for the next calls.
    #[inline]
    pub fn take(
        &mut self,
        buf: &mut [u8],
        _dom: &Domain,
    ) -> Result<Option<(usize, u64)>, DriverError> {
        loop {
            while self.next < self.taken {
                let i = self.next;
                self.next += 1;
                if !self.infos[i].valid_data {
                    continue; // a writer went away: no data
                }
                let s = &self.samples[i].data;
                let len = s.length as usize;
                if len > buf.len() {
                    return Err(DriverError::TooLarge {
                        size: len,
                        limit: buf.len(),
                    });
                }
                // SAFETY: Cyclone filled `length` bytes at `buffer`.
                unsafe { ptr::copy_nonoverlapping(s.buffer, buf.as_mut_ptr(), len) };
                return Ok(Some((len, self.infos[i].publication_handle)));
            }
            // SAFETY: TAKE_BATCH sample slots, each pointing at one of our OctetSeqs (malloc'd
            // buffers Cyclone may enlarge), and as many infos.
            let n = unsafe {
                dds_take(
                    self.r,
                    self.ptrs.as_mut_ptr(),
                    self.infos.as_mut_ptr(),
                    TAKE_BATCH,
                    TAKE_BATCH as u32,
                )
            };
            if n < 0 {
                return Err(err(&self.topic, n));
            }
            if n == 0 {
                return Ok(None);
            }
            self.taken = n as usize;
            self.next = 0;
        }
    }

    /// Block until data may be there or `deadline_ns`.
    #[inline]
    pub fn wait(&self, deadline_ns: u64) -> Result<(), DriverError> {
        wait_on(self.ws, &self.topic, deadline_ns)
    }

    fn status(&self) -> Result<dds_subscription_matched_status_t, DriverError> {
        let mut s: dds_subscription_matched_status_t = unsafe { std::mem::zeroed() };
        // SAFETY: live reader, out-parameter of the right type.
        check(&self.topic, unsafe {
            dds_get_subscription_matched_status(self.r, &mut s)
        })?;
        Ok(s)
    }

    pub fn matched_count(&self) -> Result<u32, DriverError> {
        Ok(self.status()?.current_count)
    }

    /// True when the matched writers changed since the last call (true the first time).
    pub fn matched_changed(&self) -> Result<bool, DriverError> {
        let s = self.status()?;
        let changed =
            s.total_count != self.seen_total.get() || s.current_count != self.seen_current.get();
        self.seen_total.set(s.total_count);
        self.seen_current.set(s.current_count);
        Ok(changed)
    }

    pub fn all_writers_gone(&self) -> Result<bool, DriverError> {
        let s = self.status()?;
        Ok(s.total_count >= 1 && s.current_count == 0)
    }

    /// The GUIDs (16 bytes each, sorted) of the writers this reader matched.
    pub fn matched_writer_guids(&self, out: &mut Vec<u8>) -> Result<(), DriverError> {
        out.clear();
        let mut handles = [0 as dds_instance_handle_t; 256];
        // SAFETY: live reader; the endpoint data is freed after reading its key.
        unsafe {
            let n = check(
                &self.topic,
                dds_get_matched_publications(self.r, handles.as_mut_ptr(), handles.len()),
            )? as usize;
            let mut guids: Vec<[u8; 16]> = Vec::with_capacity(n);
            for h in &handles[..n.min(handles.len())] {
                let ep = dds_get_matched_publication_data(self.r, *h);
                if !ep.is_null() {
                    guids.push((*ep).key.v);
                    dds_builtintopic_free_endpoint(ep);
                }
            }
            guids.sort();
            for g in guids {
                out.extend_from_slice(&g);
            }
        }
        Ok(())
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // SAFETY: our entities; the buffer is Cyclone-compatible malloc memory.
        unsafe {
            dds_delete(self.ws);
            dds_delete(self.r);
            free_samples(&mut self.samples);
        }
    }
}

/// Free the buffers of samples that own them (malloc'd by us or reallocated by Cyclone).
///
/// # Safety
/// No reader may fill these samples any more.
unsafe fn free_samples(samples: &mut [Sample]) {
    for s in samples.iter_mut().map(|s| &mut s.data) {
        if s.release && !s.buffer.is_null() {
            libc::free(s.buffer as *mut c_void);
            s.buffer = ptr::null_mut();
        }
    }
}

pub struct WaitSet(dds_entity_t);

impl WaitSet {
    pub fn wait(&self, deadline_ns: u64) -> Result<(), DriverError> {
        wait_on(self.0, "dds waitset", deadline_ns)
    }
}

impl Drop for WaitSet {
    fn drop(&mut self) {
        // SAFETY: our entity.
        unsafe { dds_delete(self.0) };
    }
}

fn wait_on(ws: dds_entity_t, what: &str, deadline_ns: u64) -> Result<(), DriverError> {
    let left = deadline_ns.saturating_sub(now_ns()) as i64;
    if left <= 0 {
        return Ok(());
    }
    // SAFETY: live waitset; no attach results wanted.
    let rc = unsafe { dds_waitset_wait(ws, ptr::null_mut(), 0, left) };
    if rc < 0 {
        return Err(err(what, rc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Header;

    #[test]
    fn source_timestamp_comes_from_the_header_actual_time() {
        let mut buf = vec![0u8; 64];
        Header {
            flags: 0,
            seq: 7,
            intended_ns: 5,
            actual_ns: 123_456_789,
        }
        .encode(&mut buf);
        assert_eq!(header_actual_ns(&buf), Some(123_456_789));
        assert_eq!(header_actual_ns(&buf[..31]), None);
        buf[0] ^= 1;
        assert_eq!(
            header_actual_ns(&buf),
            None,
            "not a roughnet message: dds_write stamps it"
        );
    }
}
