// A Curator client driven line by line over stdin, for the distlock interop tests (tests/test_zookeeper_curator.py
// for the locks, tests/test_zookeeper_election.py for LeaderLatch, tests/test_zookeeper_curator_barrier.py for
// DistributedDoubleBarrier).
//
// Usage: java -cp <curator, zookeeper and deps> CuratorPeer <connect string> <lock or election path>
// Commands (one per line; every command answers exactly one line starting with "OK" or "ERR"):
//   acquire mutex|read|write <timeout ms>      -> OK true | OK false
//   release mutex|read|write                   -> OK released
//   lease <max leases> <timeout ms>            -> OK true | OK false   (InterProcessSemaphoreV2 on the path)
//   unlease                                    -> OK released          (returns the oldest lease taken)
//   count-start <count path> <seed>   a SharedCount on <count path> (the seed is written only if the node is new),
//                             started, and an InterProcessSemaphoreV2 on the path that follows it   -> OK <count>
//   count-get                 the SharedCount's value as this client last read it                   -> OK <count>
//   count-set <n>             trySetCount(getVersionedValue(), n): a versioned setData              -> OK true | OK false
//   take <qty> <timeout ms>   acquire(qty, timeout) on that semaphore (qty leases, or none)         -> OK true | OK false
//   untake                    returnAll of the oldest leases taken by "take"                        -> OK released
//   counter mutex|write <n> <counter file> <log file>
//        n times: acquire, read the integer in the counter file, write it + 1, release; each critical
//        section is logged as "<start ns> <end ns>" (System.nanoTime, CLOCK_MONOTONIC) -> OK done
//   latch-start <id>          a new LeaderLatch on the path with participant id <id>, started -> OK started
//   latch-await <timeout ms>  wait until it leads                                     -> OK true | OK false
//   latch-has                 hasLeadership()                                         -> OK true | OK false
//   latch-leader              getLeader(): whether a leader was found, and its id     -> OK <true|false> <id>
//   latch-participants        getParticipants(): the ids in order, leader first       -> OK <id> <id> ...
//   latch-close               close the latch (leave the election)                    -> OK closed
//   revocable                 mutex.makeRevocable(listener) (before its acquire)      -> OK revocable
//   revoked                   how many times the listener ran so far                  -> OK <n>
//   participants              mutex.getParticipantNodes(): the node paths, holder first -> OK <path> <path> ...
//   revoke <node path>        Revoker.attemptRevoke(client, path)                     -> OK revoked
//   dbarrier-enter <path> <parties> <timeout ms>
//                             a new DistributedDoubleBarrier on <path>, entered        -> OK true | OK false
//   dbarrier-leave <timeout ms>  leave that double barrier                            -> OK true | OK false
//   quit
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.Collection;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorPeer {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                connect, 10000, 5000, new ExponentialBackoffRetry(50, 5));
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            System.out.println("ERR not connected");
            return;
        }
        InterProcessMutex mutex = new InterProcessMutex(client, path);
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        ArrayDeque<Lease> leases = new ArrayDeque<>();
        ArrayDeque<Collection<Lease>> taken = new ArrayDeque<>();
        SharedCount count = null;
        InterProcessSemaphoreV2 counted = null;
        LeaderLatch latch = null;
        DistributedDoubleBarrier dbarrier = null;
        AtomicInteger revocations = new AtomicInteger();
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            try {
                switch (w[0]) {
                    case "acquire":
                        reply("OK " + pick(w[1], mutex, rw).acquire(Long.parseLong(w[2]), TimeUnit.MILLISECONDS));
                        break;
                    case "release":
                        pick(w[1], mutex, rw).release();
                        reply("OK released");
                        break;
                    case "lease": {
                        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, Integer.parseInt(w[1]));
                        Lease lease = sem.acquire(Long.parseLong(w[2]), TimeUnit.MILLISECONDS);
                        if (lease != null) {
                            leases.add(lease);
                        }
                        reply("OK " + (lease != null));
                        break;
                    }
                    case "unlease":
                        leases.poll().close();
                        reply("OK released");
                        break;
                    case "count-start":
                        count = new SharedCount(client, w[1], Integer.parseInt(w[2]));
                        count.start();
                        counted = new InterProcessSemaphoreV2(client, path, count);
                        reply("OK " + count.getCount());
                        break;
                    case "count-get":
                        reply("OK " + count.getCount());
                        break;
                    case "count-set":
                        reply("OK " + count.trySetCount(count.getVersionedValue(), Integer.parseInt(w[1])));
                        break;
                    case "take": {
                        Collection<Lease> got = counted.acquire(
                                Integer.parseInt(w[1]), Long.parseLong(w[2]), TimeUnit.MILLISECONDS);
                        if (got != null) {
                            taken.add(got);
                        }
                        reply("OK " + (got != null));
                        break;
                    }
                    case "untake":
                        counted.returnAll(taken.poll());
                        reply("OK released");
                        break;
                    case "counter": {
                        InterProcessLock lock = pick(w[1], mutex, rw);
                        int n = Integer.parseInt(w[2]);
                        Path counter = Paths.get(w[3]);
                        StringBuilder log = new StringBuilder();
                        for (int i = 0; i < n; i++) {
                            lock.acquire();
                            long start = System.nanoTime();
                            int value = Integer.parseInt(new String(Files.readAllBytes(counter), StandardCharsets.UTF_8).trim());
                            Thread.sleep(2);
                            Files.write(counter, Integer.toString(value + 1).getBytes(StandardCharsets.UTF_8),
                                    StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE);
                            long end = System.nanoTime();
                            lock.release();
                            log.append(start).append(' ').append(end).append('\n');
                        }
                        Files.write(Paths.get(w[4]), log.toString().getBytes(StandardCharsets.UTF_8));
                        reply("OK done");
                        break;
                    }
                    case "latch-start":
                        latch = new LeaderLatch(client, path, w[1]);
                        latch.start();
                        reply("OK started");
                        break;
                    case "latch-await":
                        reply("OK " + latch.await(Long.parseLong(w[1]), TimeUnit.MILLISECONDS));
                        break;
                    case "latch-has":
                        reply("OK " + latch.hasLeadership());
                        break;
                    case "latch-leader": {
                        // a latch is needed only for its path: any started or closed one will do
                        Participant leader = (latch != null ? latch : new LeaderLatch(client, path)).getLeader();
                        reply("OK " + leader.isLeader() + " " + leader.getId());
                        break;
                    }
                    case "latch-participants": {
                        StringBuilder ids = new StringBuilder("OK");
                        for (Participant p : (latch != null ? latch : new LeaderLatch(client, path)).getParticipants()) {
                            ids.append(' ').append(p.getId());
                        }
                        reply(ids.toString());
                        break;
                    }
                    case "latch-close":
                        latch.close();
                        reply("OK closed");
                        break;
                    case "revocable":
                        mutex.makeRevocable(m -> revocations.incrementAndGet());
                        reply("OK revocable");
                        break;
                    case "revoked":
                        reply("OK " + revocations.get());
                        break;
                    case "participants": {
                        StringBuilder paths = new StringBuilder("OK");
                        for (String p : mutex.getParticipantNodes()) {
                            paths.append(' ').append(p);
                        }
                        reply(paths.toString());
                        break;
                    }
                    case "revoke":
                        Revoker.attemptRevoke(client, w[1]);
                        reply("OK revoked");
                        break;
                    case "dbarrier-enter":
                        dbarrier = new DistributedDoubleBarrier(client, w[1], Integer.parseInt(w[2]));
                        reply("OK " + dbarrier.enter(Long.parseLong(w[3]), TimeUnit.MILLISECONDS));
                        break;
                    case "dbarrier-leave":
                        reply("OK " + dbarrier.leave(Long.parseLong(w[1]), TimeUnit.MILLISECONDS));
                        break;
                    case "quit":
                        if (count != null) {
                            count.close();
                        }
                        client.close();
                        reply("OK bye");
                        return;
                    default:
                        reply("ERR unknown command " + w[0]);
                }
            } catch (Exception e) {
                reply("ERR " + e);
            }
        }
        client.close();
    }

    private static InterProcessLock pick(String kind, InterProcessMutex mutex, InterProcessReadWriteLock rw) {
        switch (kind) {
            case "mutex":
                return mutex;
            case "read":
                return rw.readLock();
            case "write":
                return rw.writeLock();
            default:
                throw new IllegalArgumentException(kind);
        }
    }

    private static void reply(String text) {
        System.out.println(text);
        System.out.flush();
    }
}
