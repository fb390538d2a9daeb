// A consume-transform-produce loop with the Java client's transactional producer, run by
// tests/system/test_txn_java.py in the JDK's source-file mode (java -cp KAFKA/libs/* TxnLoop.java).
// Args: bootstrap source sink group transactional-id records. Reads `records` records of
// `source` (read_committed), writes each value with "out-" in front to `sink`, commits the
// consumer offsets in the same transaction (sendOffsetsToTransaction); every third batch
// is aborted and read again from the committed offsets. Prints "done N" at the end.
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnLoop {
    public static void main(String[] args) {
        String bootstrap = args[0], source = args[1], sink = args[2], group = args[3];
        int records = Integer.parseInt(args[5]);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("max.poll.records", "20");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", args[4]);
        try (KafkaConsumer<String, String> consumer =
                     new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
             KafkaProducer<String, String> producer =
                     new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            consumer.subscribe(java.util.List.of(source));
            int done = 0, batches = 0;
            long deadline = System.currentTimeMillis() + 120_000;
            while (done < records && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> polled = consumer.poll(Duration.ofMillis(500));
                if (polled.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : polled) {
                    producer.send(new ProducerRecord<>(sink, r.key(), "out-" + r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()),
                            new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (++batches % 3 == 0) {
                    producer.abortTransaction();
                    Map<TopicPartition, OffsetAndMetadata> committed =
                            consumer.committed(consumer.assignment());
                    for (TopicPartition tp : consumer.assignment()) {
                        OffsetAndMetadata at = committed.get(tp);
                        consumer.seek(tp, at == null ? 0 : at.offset());
                    }
                    continue;
                }
                producer.commitTransaction();
                done += polled.count();
            }
            System.out.println("client " + org.apache.kafka.common.utils.AppInfoParser.getVersion());
            System.out.println("done " + done);
        }
    }
}
