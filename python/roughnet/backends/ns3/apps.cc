// roughnet's workload inside ns-3: the agent's stream and bulk roles as ns-3 Applications, a loss
// model (Bernoulli or Gilbert-Elliott, as roughnet-wire decides it) and per-node counters.
// JIT-compiled by cppyy when the ns3 backend first runs (sim.py); read nothing else from Python.
//
// Message layout as docs/agent-protocol.md: a 32-byte little-endian header (magic "RNM1", flags,
// header length, sequence number, intended and actual send time), then filler.  Times are ns-3's
// simulated clock in ns, so one-way latency is exact, as with CLOCK_MONOTONIC across namespaces.

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/internet-module.h"
#include "ns3/csma-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace roughnet_sim
{
using namespace ns3;

static const uint32_t MAGIC = 0x314D4E52;
static const uint16_t FLAG_WARMUP = 1;
static const uint16_t FLAG_END = 2;
static const uint32_t HEADER_BYTES = 32;
// The agent sends 5 end markers 10 ms apart after a UDP stream (docs/agent-protocol.md, "Stream end").
static const int END_MARKERS = 5;
static const int64_t END_MARKER_GAP_NS = 10000000;

struct Done
{
    int pending = 0; // receivers still running; the last one to finish stops the simulation
    void Finished()
    {
        if (--pending <= 0)
        {
            Simulator::Stop();
        }
    }
};

// Counters of one node, named as the kernel's /proc/net/snmp ones the namespace backend reads.
struct NodeCounters
{
    uint64_t tcp_out = 0, tcp_in = 0, tcp_retrans = 0, udp_out = 0, udp_in = 0;
};

static void
CountOut(NodeCounters* c, const Ipv4Header& h, Ptr<const Packet>, uint32_t)
{
    if (h.GetProtocol() == 6)
        c->tcp_out++;
    else if (h.GetProtocol() == 17)
        c->udp_out++;
}

static void
CountIn(NodeCounters* c, const Ipv4Header& h, Ptr<const Packet>, uint32_t)
{
    if (h.GetProtocol() == 6)
        c->tcp_in++;
    else if (h.GetProtocol() == 17)
        c->udp_in++;
}

static void
CountRetrans(NodeCounters* c,
             Ptr<const Packet>,
             const TcpHeader&,
             const Address&,
             const Address&,
             Ptr<const TcpSocketBase>)
{
    c->tcp_retrans++;
}

void
WatchNode(Ptr<Node> node, NodeCounters* c)
{
    Ptr<Ipv4L3Protocol> ip = node->GetObject<Ipv4L3Protocol>();
    ip->TraceConnectWithoutContext("SendOutgoing", MakeBoundCallback(&CountOut, c));
    ip->TraceConnectWithoutContext("LocalDeliver", MakeBoundCallback(&CountIn, c));
}

static void
WatchSocket(Ptr<Socket> s, NodeCounters* c)
{
    Ptr<TcpSocketBase> t = DynamicCast<TcpSocketBase>(s);
    if (t && c)
    {
        t->TraceConnectWithoutContext("Retransmission", MakeBoundCallback(&CountRetrans, c));
    }
}

// ---- drops on the channel -----------------------------------------------------------------------

static void
CountPacket(uint64_t* n, Ptr<const Packet>)
{
    (*n)++;
}

static void
CountItem(uint64_t* n, Ptr<const QueueDiscItem>)
{
    (*n)++;
}

// Drops of the device queue and of the queue disc above it (when there is one) of a sending device.
void
WatchQueue(Ptr<NetDevice> dev, uint64_t* drops)
{
    Ptr<PointToPointNetDevice> p2p = DynamicCast<PointToPointNetDevice>(dev);
    Ptr<CsmaNetDevice> csma = DynamicCast<CsmaNetDevice>(dev);
    Ptr<Queue<Packet>> q = p2p ? p2p->GetQueue() : csma->GetQueue();
    q->TraceConnectWithoutContext("Drop", MakeBoundCallback(&CountPacket, drops));
    Ptr<TrafficControlLayer> tc = dev->GetNode()->GetObject<TrafficControlLayer>();
    Ptr<QueueDisc> qd = tc ? tc->GetRootQueueDiscOnDevice(dev) : nullptr;
    if (qd)
    {
        qd->TraceConnectWithoutContext("Drop", MakeBoundCallback(&CountItem, drops));
    }
}

// ---- loss ---------------------------------------------------------------------------------------

// Bernoulli (model 0) or Gilbert-Elliott (model 1) loss of the frames a device receives, decided as
// roughnet-wire decides it (crates/wire-core/src/loss.rs: first the transition out of the current
// state, then the loss draw with the loss probability of the state the frame arrived in; netem's
// loss_gilb_ell).  On a CSMA channel every device sees every frame: with ``own`` set only frames
// addressed to this device (or broadcast) are decided, so each receiver has its own chain.
class LossModel : public ErrorModel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("roughnet_sim::LossModel").SetParent<ErrorModel>().AddConstructor<LossModel>();
        return tid;
    }

    int model = 0;
    double p = 0, r = 0, h = 0, k = 1;
    bool bad = false;
    bool filter = false;
    Mac48Address own;
    uint64_t decided = 0, dropped = 0;
    Ptr<UniformRandomVariable> rv = CreateObject<UniformRandomVariable>();

  private:
    bool DoCorrupt(Ptr<Packet> pkt) override
    {
        if (filter)
        {
            EthernetHeader eth;
            pkt->PeekHeader(eth);
            Mac48Address dst = eth.GetDestination();
            if (dst != own && !dst.IsBroadcast() && !dst.IsGroup())
            {
                return false;
            }
        }
        decided++;
        bool lost;
        if (model == 0)
        {
            lost = rv->GetValue() < p;
        }
        else
        {
            double t = rv->GetValue();
            double l = rv->GetValue();
            if (bad)
            {
                if (t < r)
                    bad = false;
                lost = l < 1.0 - h;
            }
            else
            {
                if (t < p)
                    bad = true;
                lost = l < 1.0 - k;
            }
        }
        if (lost)
            dropped++;
        return lost;
    }

    void DoReset() override
    {
        bad = false;
    }
};

// ---- header -------------------------------------------------------------------------------------

static void
PutHeader(uint8_t* b, uint16_t flags, uint64_t seq, int64_t intended, int64_t actual)
{
    uint16_t len = HEADER_BYTES;
    std::memcpy(b, &MAGIC, 4);
    std::memcpy(b + 4, &flags, 2);
    std::memcpy(b + 6, &len, 2);
    std::memcpy(b + 8, &seq, 8);
    std::memcpy(b + 16, &intended, 8);
    std::memcpy(b + 24, &actual, 8);
}

// ---- UDP stream ---------------------------------------------------------------------------------

// The agent's stream sender over UDP: open loop at ``rate`` messages per second, warm-up first, then
// ``messages`` counted ones (or as many as fit in ``duration_ns``), then the end markers.
//
// ``saturate`` (UDP bulk, "as fast as possible"): no rate; the sender keeps its node's sending queues
// full instead, one message whenever a queue disc has room for it, and waits for a dequeue when none
// has (back-pressure, as a blocking Linux UDP socket gets from its send buffer on a real NIC, or as
// ns-3's BulkSend gets from a TCP socket).  A simulated socket has no such limit of its own: without
// this it would hand the queue any number of datagrams at one instant.
class StreamSender : public Application
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("roughnet_sim::StreamSender")
                                .SetParent<Application>()
                                .AddConstructor<StreamSender>();
        return tid;
    }

    std::vector<Address> peers;
    uint32_t payload = 64;
    int64_t messages = -1;    // counted messages, or -1: duration_ns decides
    int64_t duration_ns = -1; // send while the intended time is within this long of the start
    double rate = 1.0;
    bool saturate = false;
    uint32_t warmup = 0;

    uint64_t seq = 0, sent = 0, warmup_sent = 0, bytes = 0, send_errors = 0;
    int64_t start_ns = -1, first_ns = -1, last_ns = -1;
    bool finished = false; // sent everything and the end markers are under way

  private:
    Ptr<Socket> m_sock;
    std::vector<uint8_t> m_buf;
    std::vector<Ptr<QueueDisc>> m_discs; // saturate: the node's sending queues
    bool m_waiting = false;              // saturate: every queue full, a dequeue will resume
    uint64_t m_dequeued = 0;             // saturate: messages the queue discs passed on

    void StartApplication() override
    {
        m_sock = Socket::CreateSocket(GetNode(), UdpSocketFactory::GetTypeId());
        m_sock->Bind();
        m_buf.assign(payload, 0);
        start_ns = Simulator::Now().GetNanoSeconds();
        if (saturate)
        {
            Ptr<TrafficControlLayer> tc = GetNode()->GetObject<TrafficControlLayer>();
            for (uint32_t i = 0; i < GetNode()->GetNDevices(); i++)
            {
                Ptr<QueueDisc> q = tc->GetRootQueueDiscOnDevice(GetNode()->GetDevice(i));
                if (q)
                {
                    q->TraceConnectWithoutContext("Dequeue", MakeCallback(&StreamSender::Dequeued, this));
                    m_discs.push_back(q);
                }
            }
            Fill();
            return;
        }
        Next();
    }

    // saturate: whether a queue disc has room for one more message (UDP + IP headers included)
    bool Room() const
    {
        for (const Ptr<QueueDisc>& q : m_discs)
        {
            QueueSize max = q->GetMaxSize(), cur = q->GetCurrentSize();
            uint32_t need = max.GetUnit() == QueueSizeUnit::PACKETS ? 1 : payload + 28;
            if (cur.GetValue() + need <= max.GetValue())
                return true;
        }
        return m_discs.empty();
    }

    uint64_t Queued() const
    {
        uint64_t n = m_dequeued;
        for (const Ptr<QueueDisc>& q : m_discs)
            n += q->GetNPackets();
        return n;
    }

    void Dequeued(Ptr<const QueueDiscItem>)
    {
        m_dequeued++;
        if (m_waiting)
        {
            m_waiting = false;
            Simulator::ScheduleNow(&StreamSender::Fill, this);
        }
    }

    // saturate: send while a queue has room and there is more to send, then wait for a dequeue
    void Fill()
    {
        while (true)
        {
            if (!More())
            {
                Next();
                return;
            }
            if (!Room())
            {
                m_waiting = true;
                return;
            }
            uint64_t before = Queued();
            SendNow();
            if (Queued() == before)
            {
                // the message reached no queue disc (waiting for ARP, or dropped before it): look again
                // later rather than flood at one instant
                Simulator::Schedule(MicroSeconds(100), &StreamSender::Fill, this);
                return;
            }
        }
    }

    void StopApplication() override
    {
        if (m_sock)
            m_sock->Close();
    }

    int64_t Intended(uint64_t k) const
    {
        return start_ns + (int64_t)((double)k * 1e9 / rate + 0.5);
    }

    bool More() const
    {
        if (seq < warmup)
            return true;
        if (messages >= 0)
            return (int64_t)(seq - warmup) < messages;
        if (saturate)
            return Simulator::Now().GetNanoSeconds() - start_ns < duration_ns;
        return Intended(seq) - start_ns < duration_ns;
    }

    void Next()
    {
        if (!More())
        {
            finished = true;
            for (int i = 0; i < END_MARKERS; i++)
            {
                Simulator::Schedule(NanoSeconds(i * END_MARKER_GAP_NS), &StreamSender::SendEnd, this);
            }
            return;
        }
        int64_t at = Intended(seq);
        Simulator::Schedule(NanoSeconds(at - Simulator::Now().GetNanoSeconds()), &StreamSender::SendOne, this);
    }

    void SendOne()
    {
        SendNow();
        Next();
    }

    void SendNow()
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        bool warm = seq < warmup;
        PutHeader(m_buf.data(), warm ? FLAG_WARMUP : 0, seq, saturate ? now : Intended(seq), now);
        for (const Address& a : peers)
        {
            Ptr<Packet> p = Create<Packet>(m_buf.data(), payload);
            if (m_sock->SendTo(p, 0, a) < 0)
                send_errors++;
        }
        if (warm)
            warmup_sent++;
        else
        {
            sent++;
            bytes += payload;
            if (first_ns < 0)
                first_ns = now;
            last_ns = now;
        }
        seq++;
    }

    void SendEnd()
    {
        if (saturate && !Room())
        {
            // the queues are still full of the last messages: a blocking socket would wait too
            Simulator::Schedule(MicroSeconds(100), &StreamSender::SendEnd, this);
            return;
        }
        int64_t now = Simulator::Now().GetNanoSeconds();
        PutHeader(m_buf.data(), FLAG_END, seq, now, now);
        for (const Address& a : peers)
        {
            m_sock->SendTo(Create<Packet>(m_buf.data(), HEADER_BYTES), 0, a);
        }
    }
};

// The agent's stream receiver over UDP: counts, deduplicates, records both one-way latencies.
class StreamReceiver : public Application
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("roughnet_sim::StreamReceiver")
                                .SetParent<Application>()
                                .AddConstructor<StreamReceiver>();
        return tid;
    }

    Address listen;
    int64_t messages = -1; // expected counted messages when known from the configuration
    uint32_t warmup = 0;
    int64_t linger_ns = 1000000000;
    Done* done = nullptr;

    std::vector<int64_t> lat_intended, lat_actual;
    uint64_t received = 0, duplicates = 0, reordered = 0, warmup_received = 0, bytes = 0, bad = 0;
    int64_t expected = -1, first_ns = -1, last_ns = -1, highest = -1;
    bool finished = false, complete = false;
    std::string end_reason = "timeout";

  private:
    Ptr<Socket> m_sock;
    std::vector<uint8_t> m_seen;
    bool m_end_seen = false;

    void StartApplication() override
    {
        m_sock = Socket::CreateSocket(GetNode(), UdpSocketFactory::GetTypeId());
        m_sock->Bind(listen);
        m_sock->SetRecvCallback(MakeCallback(&StreamReceiver::Read, this));
        if (messages >= 0)
            expected = messages;
    }

    void StopApplication() override
    {
        if (m_sock)
            m_sock->Close();
    }

    void Finish(const char* reason)
    {
        if (finished)
            return;
        finished = true;
        end_reason = reason;
        complete = expected >= 0 && (int64_t)received >= expected;
        if (done)
            done->Finished();
    }

    void Read(Ptr<Socket> s)
    {
        Address from;
        Ptr<Packet> p;
        uint8_t h[HEADER_BYTES];
        while ((p = s->RecvFrom(from)))
        {
            if (finished)
                continue;
            int64_t now = Simulator::Now().GetNanoSeconds();
            uint32_t size = p->GetSize();
            uint32_t magic = 0;
            uint16_t flags = 0;
            uint64_t seq = 0;
            int64_t intended = 0, actual = 0;
            if (size >= HEADER_BYTES)
            {
                p->CopyData(h, HEADER_BYTES);
                std::memcpy(&magic, h, 4);
                std::memcpy(&flags, h + 4, 2);
                std::memcpy(&seq, h + 8, 8);
                std::memcpy(&intended, h + 16, 8);
                std::memcpy(&actual, h + 24, 8);
            }
            if (magic != MAGIC)
            {
                bad++;
                continue;
            }
            if (flags & FLAG_END)
            {
                if (expected < 0)
                    expected = (int64_t)seq - (int64_t)warmup;
                if (!m_end_seen)
                {
                    m_end_seen = true;
                    Simulator::Schedule(NanoSeconds(linger_ns), &StreamReceiver::Finish, this, "end_marker");
                }
            }
            else if (flags & FLAG_WARMUP)
            {
                warmup_received++;
            }
            else
            {
                if (seq < warmup)
                {
                    bad++;
                    continue;
                }
                uint64_t i = seq - warmup;
                if (i >= m_seen.size())
                    m_seen.resize(i + 1 + m_seen.size() / 2, 0);
                if (m_seen[i])
                {
                    duplicates++;
                    continue;
                }
                m_seen[i] = 1;
                if ((int64_t)i < highest)
                    reordered++;
                else
                    highest = (int64_t)i;
                received++;
                bytes += size;
                lat_intended.push_back(now - intended);
                lat_actual.push_back(now - actual);
                if (first_ns < 0)
                    first_ns = now;
                last_ns = now;
            }
            if (expected >= 0 && (int64_t)received >= expected)
                Finish("complete");
        }
    }
};

// ---- TCP bulk -----------------------------------------------------------------------------------

// The agent's bulk sender over TCP: raw writes of ``send_size`` bytes (no header), like iperf3, for
// ``duration_ns`` or ``chunks`` writes, then close.
class BulkSender : public Application
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("roughnet_sim::BulkSender").SetParent<Application>().AddConstructor<BulkSender>();
        return tid;
    }

    Address peer;
    uint32_t send_size = 131072;
    int64_t chunks = -1;
    int64_t duration_ns = -1;
    NodeCounters* counters = nullptr;

    uint64_t sent = 0, bytes = 0, send_errors = 0;
    int64_t first_ns = -1, last_ns = -1;
    bool connected = false, failed = false, closed = false;

  private:
    Ptr<Socket> m_sock;
    bool m_stop = false;
    uint32_t m_left = 0; // bytes of the current write call still to hand over

    void StartApplication() override
    {
        m_sock = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        WatchSocket(m_sock, counters);
        m_sock->Bind();
        m_sock->SetConnectCallback(MakeCallback(&BulkSender::Connected, this),
                                   MakeCallback(&BulkSender::ConnectFailed, this));
        m_sock->SetSendCallback(MakeCallback(&BulkSender::Space, this));
        m_sock->Connect(peer);
        if (duration_ns >= 0)
            Simulator::Schedule(NanoSeconds(duration_ns), &BulkSender::Stop, this);
    }

    void StopApplication() override
    {
        Stop();
    }

    void Connected(Ptr<Socket>)
    {
        connected = true;
        Fill();
    }

    void ConnectFailed(Ptr<Socket>)
    {
        failed = true;
    }

    void Space(Ptr<Socket>, uint32_t)
    {
        if (connected)
            Fill();
    }

    // As a blocking write() of send_size bytes on Linux: whatever fits now is copied, the rest when the
    // socket has room again; one write call (``sent``) is one whole chunk handed over.
    void Fill()
    {
        while (!m_stop)
        {
            uint32_t room = m_sock->GetTxAvailable();
            if (room == 0)
                break;
            if (m_left == 0)
                m_left = send_size;
            uint32_t n = std::min(room, m_left);
            int r = m_sock->Send(Create<Packet>(n));
            if (r < 0)
            {
                send_errors++;
                break;
            }
            int64_t now = Simulator::Now().GetNanoSeconds();
            if (first_ns < 0)
                first_ns = now;
            last_ns = now;
            bytes += (uint64_t)r;
            m_left -= (uint32_t)r;
            if (m_left == 0)
            {
                sent++;
                if (chunks >= 0 && (int64_t)sent >= chunks)
                    Stop();
            }
        }
    }

    void Stop()
    {
        if (m_stop)
            return;
        m_stop = true;
        if (m_sock && connected && !closed)
        {
            closed = true;
            m_sock->Close(); // FIN once the send buffer has drained, as close() on Linux
        }
    }
};

// The agent's bulk receiver over TCP: counts bytes until every sender's connection reached EOF.
class BulkReceiver : public Application
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("roughnet_sim::BulkReceiver")
                                .SetParent<Application>()
                                .AddConstructor<BulkReceiver>();
        return tid;
    }

    Address listen;
    int senders = 1;
    Done* done = nullptr;
    NodeCounters* counters = nullptr;

    uint64_t bytes = 0;
    int64_t first_ns = -1, last_ns = -1;
    int eofs = 0;
    bool finished = false, complete = false;
    std::string end_reason = "timeout";

  private:
    Ptr<Socket> m_listen;
    std::vector<Ptr<Socket>> m_conns;

    void StartApplication() override
    {
        m_listen = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        m_listen->Bind(listen);
        m_listen->Listen();
        m_listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&BulkReceiver::Accept, this));
    }

    void StopApplication() override
    {
        if (m_listen)
            m_listen->Close();
    }

    void Accept(Ptr<Socket> s, const Address&)
    {
        WatchSocket(s, counters);
        s->SetRecvCallback(MakeCallback(&BulkReceiver::Read, this));
        s->SetCloseCallbacks(MakeCallback(&BulkReceiver::Eof, this), MakeCallback(&BulkReceiver::Eof, this));
        m_conns.push_back(s);
    }

    void Read(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()) && p->GetSize() > 0)
        {
            int64_t now = Simulator::Now().GetNanoSeconds();
            if (first_ns < 0)
                first_ns = now;
            last_ns = now;
            bytes += p->GetSize();
        }
    }

    void Eof(Ptr<Socket> s)
    {
        Read(s);
        s->Close();
        if (++eofs >= senders && !finished)
        {
            finished = true;
            complete = true;
            end_reason = "end_marker";
            if (done)
                done->Finished();
        }
    }
};

} // namespace roughnet_sim

// ---- helpers for the Python side (cppyy reaches these more simply than ns-3's own overloads) -----

namespace roughnet_sim
{
Address
Inet(const std::string& ip, uint16_t port)
{
    return InetSocketAddress(Ipv4Address(ip.c_str()), port);
}

// Rate (point-to-point; a CSMA channel has one rate, set on the channel), MTU and a one-packet device
// queue: the scenario's queue is the queue disc above it (SetQueue).
void
ConfigureDevice(Ptr<NetDevice> dev, uint64_t rate_bps, uint32_t mtu)
{
    Ptr<PointToPointNetDevice> p2p = DynamicCast<PointToPointNetDevice>(dev);
    Ptr<CsmaNetDevice> csma = DynamicCast<CsmaNetDevice>(dev);
    dev->SetMtu(mtu);
    if (p2p)
    {
        p2p->SetDataRate(DataRate(rate_bps));
        p2p->GetQueue()->SetMaxSize(QueueSize("1p"));
    }
    else
    {
        csma->GetQueue()->SetMaxSize(QueueSize("1p"));
    }
}

// The scenario's drop-tail queue of a sending device ("100p" or "62500B"), in place of the queue disc
// Ipv4AddressHelper installed.
void
SetQueue(Ptr<NetDevice> dev, const std::string& size)
{
    TrafficControlHelper tch;
    tch.Uninstall(dev);
    tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize(size)));
    tch.Install(dev);
}

// A loss model on the receiving side of ``dev`` (the device keeps it; the raw pointer is for reading).
LossModel*
AttachLoss(Ptr<NetDevice> dev, bool filter)
{
    Ptr<LossModel> m = CreateObject<LossModel>();
    m->filter = filter;
    m->own = Mac48Address::ConvertFrom(dev->GetAddress());
    dev->SetAttribute("ReceiveErrorModel", PointerValue(m));
    return PeekPointer(m);
}

// An Application of type T on ``node``, started at ``start_ns`` (the node keeps it; fields are set and read
// through the raw pointer: cppyy does not assign through ns-3's Ptr).
template <typename T>
T*
Install(Ptr<Node> node, int64_t start_ns)
{
    Ptr<T> a = CreateObject<T>();
    a->SetStartTime(NanoSeconds(start_ns));
    node->AddApplication(a);
    return PeekPointer(a);
}

StreamSender*
NewStreamSender(Ptr<Node> n, int64_t s)
{
    return Install<StreamSender>(n, s);
}

StreamReceiver*
NewStreamReceiver(Ptr<Node> n, int64_t s)
{
    return Install<StreamReceiver>(n, s);
}

BulkSender*
NewBulkSender(Ptr<Node> n, int64_t s)
{
    return Install<BulkSender>(n, s);
}

BulkReceiver*
NewBulkReceiver(Ptr<Node> n, int64_t s)
{
    return Install<BulkReceiver>(n, s);
}
} // namespace roughnet_sim
