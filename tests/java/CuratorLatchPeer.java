// A Curator LeaderLatch driven line by line over stdin, for the distlock election interop tests
// (tests/test_zookeeper_election.py).
//
// Usage: java -cp <curator, zookeeper and deps> CuratorLatchPeer <connect string> <election path>
// Commands (one per line; every command answers exactly one line starting with "OK" or "ERR"):
//   start <id>              a new LeaderLatch on the path with participant id <id>, started -> OK started
//   await <timeout ms>      wait until it leads                                           -> OK true | OK false
//   has                     hasLeadership()                                               -> OK true | OK false
//   leader                  getLeader(): whether a leader was found, and its id           -> OK <true|false> <id>
//   participants            getParticipants(): the ids in order, leader first             -> OK <id> <id> ...
//   close                   close the latch (leave the election)                          -> OK closed
//   quit
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLatchPeer {
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
        LeaderLatch latch = null;
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            try {
                switch (w[0]) {
                    case "start":
                        latch = new LeaderLatch(client, path, w[1]);
                        latch.start();
                        reply("OK started");
                        break;
                    case "await":
                        reply("OK " + latch.await(Long.parseLong(w[1]), TimeUnit.MILLISECONDS));
                        break;
                    case "has":
                        reply("OK " + latch.hasLeadership());
                        break;
                    case "leader": {
                        // a latch is needed only for its path: any started or closed one will do
                        Participant leader = (latch != null ? latch : new LeaderLatch(client, path)).getLeader();
                        reply("OK " + leader.isLeader() + " " + leader.getId());
                        break;
                    }
                    case "participants": {
                        StringBuilder ids = new StringBuilder("OK");
                        for (Participant p : (latch != null ? latch : new LeaderLatch(client, path)).getParticipants()) {
                            ids.append(' ').append(p.getId());
                        }
                        reply(ids.toString());
                        break;
                    }
                    case "close":
                        latch.close();
                        reply("OK closed");
                        break;
                    case "quit":
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

    private static void reply(String text) {
        System.out.println(text);
        System.out.flush();
    }
}
