// The lifeline: a lost-rank detector beside MPI (docs/CLUSTER.md, "Losing a
// node"). When a node goes down mid-run, Open MPI's survivors block in its TCP
// error path until mpirun ends them, and none of them can say what happened.
// So every rank also holds one plain TCP connection to every other rank, on
// which nothing travels but a hello, a goodbye and the watchdog's roll call. A peer's connection that closes
// without one means its process is gone (killed, crashed, or its node lost): the kernel of its node closed
// the socket, or keep-alive probes found nobody. A thread of this rank then prints which world ranks were
// lost and on which node, and ends this rank with kLostPeerStatus, seconds before mpirun would.
#pragma once

#include <string>
#include <vector>

#include "comm/nodes.h"

namespace mt {

class Group;

// The exit status of a rank that lost a peer (docs/PARALLELISM.md, failures).
inline constexpr int kLostPeerStatus = 3;

// Collective over `world` (every rank calls it once, after the nodes are
// known); a no-op for a world of one. Returns "" once this rank's lifeline
// runs, else why it could not start (a socket call failed), for a warning:
// the job then runs as before, ended by mpirun alone when a node is lost.
// Peers it could not reach within 2 s are left unwatched and named.
std::string start_lifeline(const Group& world, const NodeMap& nodes);

// This rank ends by its own choice (a normal end, or an error it reports
// itself): tell every peer, so that none reports it lost, and stop reporting
// lost peers (their end may follow from ours). Idempotent, from any thread; a
// no-op without a lifeline. Registered with atexit by start_lifeline.
void lifeline_goodbye();

// The watchdog's roll call on the lifeline (comm/work.cpp): this rank waits in
// collective `seq` of axis `axis`, at call site `label`; told to world ranks
// `to`. MPI carries the same word, but on a slowed link it queues behind the
// call's own data; the lifeline's connection is a flow of its own. A no-op
// without a lifeline.
void lifeline_announce(const std::string& axis, int64_t seq, const std::string& label,
                       const std::vector<int>& to);
struct HeardWait {
  int64_t seq = -1;  // -1: nothing heard
  std::string label;
};
// What world rank `world_rank` last announced on axis `axis` (an axis names
// one group per rank: the ranks of a rank's group on an axis share it).
HeardWait lifeline_heard(const std::string& axis, int world_rank);

// The line a survivor prints: "meshtrain: rank 0 of 4 lost world ranks 2, 3
// on node n1 (every rank of that node): …", the lost ranks grouped by node.
std::string lost_ranks_message(int me, const std::vector<int>& lost, const NodeMap& nodes);

}  // namespace mt
