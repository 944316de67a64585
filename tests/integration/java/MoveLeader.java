// Makes a broker the leader of one partition: it becomes the partition's first (preferred)
// replica, then a preferred-leader election runs. Kafka's Java admin client does what
// confluent_kafka's cannot (reassign replicas). Run with the broker's jars on the class path:
//   java -cp 'libs/*' MoveLeader.java <bootstrap> <topic> <partition> <broker id>
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ElectionNotNeededException;

public class MoveLeader {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        TopicPartition tp = new TopicPartition(topic, Integer.parseInt(args[2]));
        int leader = Integer.parseInt(args[3]);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", args[0]))) {
            TopicDescription description = admin.describeTopics(Set.of(topic)).allTopicNames().get().get(topic);
            List<Integer> replicas = new ArrayList<>();
            replicas.add(leader);
            for (Node node : description.partitions().get(tp.partition()).replicas()) {
                if (node.id() != leader) {
                    replicas.add(node.id());
                }
            }
            admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(replicas))))
                .all().get();
            long deadline = System.currentTimeMillis() + 30_000;
            while (!admin.listPartitionReassignments(Set.of(tp)).reassignments().get().isEmpty()) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("the reassignment of " + tp + " did not finish");
                }
                Thread.sleep(50);
            }
            try {
                admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get().get(tp)
                    .ifPresent(e -> { if (!(e instanceof ElectionNotNeededException)) throw new RuntimeException(e); });
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof ElectionNotNeededException)) {
                    throw e;
                }
            }
            System.out.println("replicas " + replicas);
        }
    }
}
