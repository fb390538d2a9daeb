import java.util.*;
import org.apache.kafka.clients.admin.*;

/** Describes topics with the admin client; prints one line per topic. */
public class DescribeTopics {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        List<String> names = Arrays.asList(args).subList(1, args.length);
        try (Admin admin = Admin.create(props)) {
            DescribeTopicsOptions options = new DescribeTopicsOptions().partitionSizeLimitPerResponse(1);
            Map<String, TopicDescription> found =
                admin.describeTopics(names, options).allTopicNames().get();
            for (String name : names) {
                TopicDescription d = found.get(name);
                StringBuilder leaders = new StringBuilder();
                for (org.apache.kafka.common.TopicPartitionInfo p : d.partitions())
                    leaders.append(p.partition()).append(':').append(p.leader().id()).append(' ');
                System.out.println("topic " + d.name() + " id " + d.topicId() + " partitions " + d.partitions().size() + " leaders " + leaders.toString().trim());
            }
            try {
                admin.describeTopics(Collections.singletonList("no-such-topic-k4"), options).allTopicNames().get();
            } catch (Exception e) {
                System.out.println("missing " + e.getCause().getClass().getSimpleName());
            }
        }
    }
}
