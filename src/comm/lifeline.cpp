#include "comm/lifeline.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "comm/group.h"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxAddrs = 4;            // IPv4 addresses a rank offers its peers
constexpr int kRecord = 2 + kMaxAddrs;  // port, count, addresses (all_gather'd as int64)
constexpr int kConnectMs = 2000;        // per peer, over all its addresses
constexpr double kCollectS = 0.3;       // after a first loss, how long to wait for the rest of its node

struct Peer {
  int fd = -1;
  int rank = -1;     // -1 until its hello (4 bytes: its world rank) is read
  bool bye = false;  // it said goodbye: its close is its own choice
  bool lost = false;
  std::string inbox;  // bytes of a line not yet complete
};

// Lives until the process ends (never freed: the thread may outlive main's
// statics, and atexit's goodbye may run while it polls).
struct Lifeline {
  std::mutex mu;
  std::vector<Peer> peers;
  int listen_fd = -1;
  int me = 0;
  NodeMap nodes;
  std::atomic<bool> leaving{false};
  std::map<std::pair<std::string, int>, HeardWait> heard;  // (axis, world rank) → its last announcement
};
std::atomic<Lifeline*> g_lifeline{nullptr};

void keep_alive(int fd) {
  const int on = 1, idle = 10, interval = 2, count = 5;  // a silent dead peer: found in ~20 s
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// This rank's record: the listening port, then its IPv4 addresses (up, not
// loopback: a peer on another node must reach one of them; a peer on this
// node uses loopback).
std::vector<int64_t> my_record(int port) {
  std::vector<int64_t> rec(kRecord, 0);
  rec[0] = port;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return rec;
  for (ifaddrs* a = list; a != nullptr && rec[1] < kMaxAddrs; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    rec[static_cast<size_t>(2 + rec[1]++)] =
        ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
  }
  freeifaddrs(list);
  return rec;
}

// A connected socket to addr:port, or -1 after `ms` milliseconds.
int connect_within(uint32_t addr, int port, int ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(addr);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Sends the hello "H <me> <r>" and waits up to `ms` for rank r's "A": an
// address of the peer's record may lead to another listener (a bridge address
// every host has), which refuses a hello for another rank.
bool greeted(int fd, int me, int r, int ms) {
  const std::string hello = "H " + std::to_string(me) + " " + std::to_string(r) + "\n";
  if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) return false;
  pollfd p{fd, POLLIN, 0};
  char ack[2] = {0, 0};
  return poll(&p, 1, ms) == 1 && recv(fd, ack, 2, MSG_WAITALL) == 2 && ack[0] == 'A' && ack[1] == '\n';
}

// Connects to peer `r` (its record `rec`), over loopback when it is on this
// node, else over its addresses in turn, and greets it. -1 if none answered.
int reach(int me, int r, const int64_t* rec, bool same_node) {
  const auto until = Clock::now() + std::chrono::milliseconds(kConnectMs);
  std::vector<uint32_t> addrs;
  if (same_node) addrs.push_back(INADDR_LOOPBACK);
  for (int64_t i = 0; i < rec[1]; ++i)
    addrs.push_back(static_cast<uint32_t>(rec[2 + i]));
  for (uint32_t a : addrs) {
    const int left =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (left <= 0) break;
    const int fd = connect_within(a, static_cast<int>(rec[0]), left);
    if (fd < 0) continue;
    if (greeted(fd, me, r, left)) return fd;
    close(fd);
  }
  return -1;
}

void send_line(const Peer& p, const std::string& line) {
  if (p.fd >= 0) send(p.fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Takes in one line a peer sent: "H <rank> <this rank>" (its hello, the
// connector's first; answered "A"), "B" (its goodbye) or "W <axis> <seq> <label>" (it waits in that
// collective: lifeline_announce).
void take_line(Lifeline& l, Peer& p, const std::string& line) {
  if (line.rfind("H ", 0) == 0) {
    const size_t sp = line.find(' ', 2);
    if (sp == std::string::npos || std::atoi(line.c_str() + sp + 1) != l.me) {  // meant for another rank
      close(p.fd);
      p.fd = -1;
      return;
    }
    p.rank = std::atoi(line.c_str() + 2);
    send_line(p, "A\n");
  } else if (line == "B") {
    p.bye = true;
  } else if (line.rfind("W ", 0) == 0 && p.rank >= 0) {
    const size_t a = line.find(' ', 2), b = a == std::string::npos ? a : line.find(' ', a + 1);
    if (b == std::string::npos) return;
    HeardWait& h = l.heard[{line.substr(2, a - 2), p.rank}];
    h.seq = std::atoll(line.c_str() + a + 1);
    h.label = line.substr(b + 1);
  }
}

// Reads what a peer sent, or its end (0 or an error).
void read_peer(Lifeline& l, Peer& p) {
  char buf[512];
  const ssize_t n = recv(p.fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close(p.fd);
    p.fd = -1;
    if (!p.bye && p.rank >= 0) p.lost = true;
    return;
  }
  p.inbox.append(buf, static_cast<size_t>(n));
  for (size_t end = p.inbox.find('\n'); end != std::string::npos; end = p.inbox.find('\n')) {
    take_line(l, p, p.inbox.substr(0, end));
    p.inbox.erase(0, end + 1);
  }
}

void send_goodbyes(Lifeline& l) {
  std::lock_guard<std::mutex> lock(l.mu);
  for (const Peer& p : l.peers)
    send_line(p, "B\n");
}

// The survivors of a lost node end one by one: each says goodbye first, so
// that none of them reports another survivor lost.
void report_and_end(Lifeline& l, const std::vector<int>& lost) {
  if (l.leaving.exchange(true)) return;  // this rank began to end on its own meanwhile
  send_goodbyes(l);
  const std::string msg = lost_ranks_message(l.me, lost, l.nodes);
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  std::_Exit(kLostPeerStatus);
}

// The watcher: accepts the peers above this rank, reads every peer, and on a
// first loss waits kCollectS for the rest of its node before reporting.
void watch(Lifeline& l) {
  Clock::time_point first_loss{};
  bool any_lost = false;
  for (;;) {
    std::vector<pollfd> fds;
    {
      std::lock_guard<std::mutex> lock(l.mu);
      fds.push_back({l.listen_fd, POLLIN, 0});
      for (const Peer& p : l.peers)
        fds.push_back({p.fd, POLLIN, 0});  // fd -1 is ignored by poll
    }
    poll(fds.data(), fds.size(), 100);
    std::vector<int> lost;
    {
      std::lock_guard<std::mutex> lock(l.mu);
      if (fds[0].revents & POLLIN) {
        const int fd = accept4(l.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          keep_alive(fd);
          l.peers.push_back({fd, -1, false, false, {}});
        }
      }
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents != 0 && i - 1 < l.peers.size() && l.peers[i - 1].fd == fds[i].fd)
          read_peer(l, l.peers[i - 1]);
      for (const Peer& p : l.peers)
        if (p.lost) lost.push_back(p.rank);
    }
    if (l.leaving.load()) return;
    if (!lost.empty() && !any_lost) {
      any_lost = true;
      first_loss = Clock::now();
    }
    if (any_lost && std::chrono::duration<double>(Clock::now() - first_loss).count() > kCollectS)
      report_and_end(l, lost);
  }
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v)
    s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

std::string lost_ranks_message(int me, const std::vector<int>& lost, const NodeMap& nodes) {
  std::map<int, std::vector<int>> by_node;
  for (int r : lost)
    by_node[nodes.node_of_rank[static_cast<size_t>(r)]].push_back(r);
  std::string where;
  for (auto& [node, ranks] : by_node) {
    std::sort(ranks.begin(), ranks.end());
    int on_node = 0;
    for (int n : nodes.node_of_rank)
      on_node += n == node ? 1 : 0;
    where += std::string(where.empty() ? "" : "; ") + "world rank" + (ranks.size() > 1 ? "s " : " ") +
             join(ranks) + " on node " + nodes.names[static_cast<size_t>(node)] +
             (static_cast<int>(ranks.size()) == on_node ? " (every rank of that node)" : "");
  }
  return "meshtrain: rank " + std::to_string(me) + " of " + std::to_string(nodes.node_of_rank.size()) +
         " lost " + where +
         ": their connections closed without a goodbye (the processes were killed or crashed, or their "
         "node went down); ending this rank (exit status " +
         std::to_string(kLostPeerStatus) + ")";
}

std::string start_lifeline(const Group& world, const NodeMap& nodes) {
  const int P = world.size(), me = world.rank();
  if (P == 1) return "";
  std::string why;
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof sa;
  if (lfd < 0 || bind(lfd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || listen(lfd, P) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    why = std::string("a listening socket: ") + std::strerror(errno);
  // Every rank takes part in the exchange, a failed one with port 0.
  const std::vector<int64_t> mine = my_record(why.empty() ? ntohs(sa.sin_port) : 0);
  std::vector<int64_t> all(static_cast<size_t>(kRecord * P));
  Group g = world;
  g.all_gather(mine.data(), all.data(), kRecord, ElemType::i64, "lifeline: ports and addresses");
  if (!why.empty()) return why;
  auto* l = new Lifeline;  // never freed (see Lifeline)
  l->listen_fd = lfd;
  l->me = me;
  l->nodes = nodes;
  g_lifeline.store(l);
  std::atexit(lifeline_goodbye);
  std::thread([l] { watch(*l); }).detach();
  std::string unreached;
  for (int r = 0; r < me; ++r) {  // this rank connects to the ranks below it; the ones above connect to it
    const int64_t* rec = &all[static_cast<size_t>(kRecord * r)];
    const bool same =
        nodes.node_of_rank[static_cast<size_t>(r)] == nodes.node_of_rank[static_cast<size_t>(me)];
    const int fd = rec[0] == 0 ? -1 : reach(me, r, rec, same);
    if (fd < 0) {
      unreached += (unreached.empty() ? "" : ", ") + std::to_string(r);
      continue;
    }
    keep_alive(fd);
    std::lock_guard<std::mutex> lock(l->mu);
    l->peers.push_back({fd, r, false, false, {}});
  }
  // Every greeting is answered once the acceptor's thread has taken it in, so
  // after this every rank knows every peer that reached it: none announces a
  // wait before its peers can hear it.
  int64_t done = 1;
  g.all_reduce(&done, 1, "lifeline: connected");
  return unreached.empty() ? "" : "world ranks " + unreached + " could not be reached: they are not watched";
}

void lifeline_goodbye() {
  Lifeline* l = g_lifeline.load();
  if (l == nullptr || l->leaving.exchange(true)) return;
  send_goodbyes(*l);
}

void lifeline_announce(const std::string& axis, int64_t seq, const std::string& label,
                       const std::vector<int>& to) {
  Lifeline* l = g_lifeline.load();
  if (l == nullptr) return;
  std::string line = "W " + axis + " " + std::to_string(seq) + " ";
  for (char c : label)
    line += c == '\n' ? ' ' : c;
  line += "\n";
  std::lock_guard<std::mutex> lock(l->mu);
  for (const Peer& p : l->peers)
    if (std::find(to.begin(), to.end(), p.rank) != to.end()) send_line(p, line);
}

HeardWait lifeline_heard(const std::string& axis, int world_rank) {
  Lifeline* l = g_lifeline.load();
  if (l == nullptr) return {};
  std::lock_guard<std::mutex> lock(l->mu);
  const auto it = l->heard.find({axis, world_rank});
  return it == l->heard.end() ? HeardWait{} : it->second;
}

}  // namespace mt
