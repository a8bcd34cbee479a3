import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.jsonschema.JsonSchemaKafkaDeserializer;
import io.apicurio.registry.resolver.strategy.ArtifactReference;
import io.apicurio.registry.serde.protobuf.ProtobufKafkaDeserializer;
import io.apicurio.registry.utils.protobuf.schema.ProtobufSchema;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.generic.GenericContainer;
import org.apache.avro.generic.GenericData;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Reads Confluent-framed records (magic byte 0, 4-byte big-endian schema id, body; Protobuf with
 * the message-index list) from Kafka and decodes them with Apicurio Registry's own Kafka
 * deserializers, which fetch each schema from the registry by that id. Prints one JSON line per
 * record: topic, partition, offset, key, schemaId (read from the frame), format and value (Avro
 * as plain JSON with unions unwrapped, Protobuf as JsonFormat with proto field names, JSON Schema
 * payloads as they are), or "error" with the deserializer's message instead of value.
 *
 * <pre>
 * ConfluentConsumer --bootstrap HOST:PORT --registry http://HOST:PORT/apis/registry/v3
 *     --topic NAME=avro|protobuf|protobuf-apicurio|json ... [--count N] [--timeout-ms MS]
 *     [--user USER --password-file FILE] [--serde KEY=VALUE ...]
 * </pre>
 *
 * It stops after --count records (default: when --timeout-ms, default 30000, passes with nothing
 * new) and exits 1 when any record failed to decode or fewer than --count arrived.
 *
 * The deserializers are configured for Confluent framing: no Apicurio headers, the 4-byte id
 * handler, ids taken as content ids (what the registry's ccompat API hands out as schema ids).
 * Format "protobuf" takes the schema from Apicurio's resolver and picks the message type by the
 * Confluent message indexes itself (decodeProtobuf); "protobuf-apicurio" leaves everything to
 * Apicurio's ProtobufKafkaDeserializer, which fails on Confluent framing as of serdes 3.1.7.
 */
public final class ConfluentConsumer {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        Map<String, String> topics = new LinkedHashMap<>();
        String bootstrap = null;
        String registry = null;
        String user = null;
        String passwordFile = null;
        long count = -1;
        long timeoutMs = 30000;
        Map<String, Object> extra = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (a) {
                case "--bootstrap" -> bootstrap = v;
                case "--registry" -> registry = v;
                case "--user" -> user = v;
                case "--password-file" -> passwordFile = v;
                case "--count" -> count = Long.parseLong(v);
                case "--timeout-ms" -> timeoutMs = Long.parseLong(v);
                case "--topic" -> {
                    int eq = v == null ? -1 : v.indexOf('=');
                    if (eq <= 0) {
                        usage("--topic wants NAME=FORMAT");
                    }
                    topics.put(v.substring(0, eq), v.substring(eq + 1));
                }
                case "--serde" -> {
                    int eq = v == null ? -1 : v.indexOf('=');
                    if (eq <= 0) {
                        usage("--serde wants KEY=VALUE");
                    }
                    extra.put(v.substring(0, eq), v.substring(eq + 1));
                }
                default -> usage("unknown argument " + a);
            }
            i++;
        }
        if (bootstrap == null || registry == null || topics.isEmpty()) {
            usage("need --bootstrap, --registry and at least one --topic");
        }

        Map<String, Object> serde = new HashMap<>();
        serde.put("apicurio.registry.url", registry);
        serde.put("apicurio.registry.headers.enabled", false);
        serde.put("apicurio.registry.id-handler", "io.apicurio.registry.serde.Default4ByteIdHandler");
        serde.put("apicurio.registry.use-id", "contentId");
        serde.put("apicurio.registry.serde.validation-enabled", true);
        if (user != null) {
            serde.put("apicurio.registry.auth.username", user);
            serde.put("apicurio.registry.auth.password",
                    Files.readString(Path.of(passwordFile), StandardCharsets.UTF_8).strip());
        }
        Map<String, Deserializer<?>> byTopic = new HashMap<>();
        for (Map.Entry<String, String> t : topics.entrySet()) {
            byTopic.put(t.getKey(), deserializer(t.getValue(), serde, extra));
        }

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, "walrelay-registry-consumer-" + System.nanoTime());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        long seen = 0;
        long failed = 0;
        try (KafkaConsumer<String, byte[]> consumer =
                new KafkaConsumer<>(props, new StringDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(new ArrayList<>(topics.keySet()));
            long idleSince = System.currentTimeMillis();
            while ((count < 0 || seen < count) && System.currentTimeMillis() - idleSince < timeoutMs) {
                var records = consumer.poll(Duration.ofMillis(500));
                if (!records.isEmpty()) {
                    idleSince = System.currentTimeMillis();
                }
                for (ConsumerRecord<String, byte[]> r : records) {
                    seen++;
                    if (!print(r, topics.get(r.topic()), byTopic.get(r.topic()))) {
                        failed++;
                    }
                }
            }
        }
        for (Deserializer<?> d : byTopic.values()) {
            d.close();
        }
        System.out.flush();
        if (failed > 0 || (count >= 0 && seen < count)) {
            System.err.printf("ConfluentConsumer: %d records, %d failed to decode, %d expected%n", seen, failed,
                    count);
            System.exit(1);
        }
    }

    private static Deserializer<?> deserializer(String format, Map<String, Object> common,
            Map<String, Object> extra) {
        Map<String, Object> cfg = new HashMap<>(common);
        Deserializer<?> d;
        switch (format) {
            case "avro" -> d = new AvroKafkaDeserializer<>();
            case "json" -> d = new JsonSchemaKafkaDeserializer<>();
            case "protobuf", "protobuf-apicurio" -> {
                // Confluent writes the message-index list after the id; Apicurio's own framing
                // writes a type reference there instead. Apicurio's deserializer (3.1.7) reads
                // the list but does not use it to choose the message type (see decodeProtobuf).
                cfg.put("apicurio.registry.serde.read-indexes", true);
                cfg.put("apicurio.registry.serde.read-type-ref", false);
                d = new ProtobufKafkaDeserializer<>();
            }
            default -> throw new IllegalArgumentException("unknown format " + format);
        }
        cfg.putAll(extra);
        d.configure(cfg, false);
        return d;
    }

    /** Prints r's line; false when its value did not decode. */
    private static boolean print(ConsumerRecord<String, byte[]> r, String format, Deserializer<?> d)
            throws Exception {
        ObjectNode line = JSON.createObjectNode();
        line.put("topic", r.topic());
        line.put("partition", r.partition());
        line.put("offset", r.offset());
        line.put("key", r.key());
        line.put("format", format);
        byte[] v = r.value();
        boolean ok = true;
        if (v == null) {
            line.putNull("value");
        } else {
            if (v.length >= 5 && v[0] == 0) {
                line.put("schemaId", ByteBuffer.wrap(v, 1, 4).getInt());
            }
            try {
                Object decoded = format.equals("protobuf")
                        ? decodeProtobuf((ProtobufKafkaDeserializer<?>) d, v)
                        : d.deserialize(r.topic(), r.headers(), v);
                line.set("value", toJson(decoded));
            } catch (RuntimeException e) {
                Throwable root = e;
                while (root.getCause() != null && root.getCause() != root) {
                    root = root.getCause();
                }
                String cause = root instanceof com.microsoft.kiota.ApiException api
                        ? "registry answered HTTP " + api.getResponseStatusCode() + " (" + root.getClass().getSimpleName() + ")"
                        : root.toString();
                line.put("error", e.getClass().getName() + (root != e ? "; cause: " + cause : ": " + e.getMessage()));
                ok = false;
            }
        }
        System.out.println(JSON.writeValueAsString(line));
        return ok;
    }

    /**
     * Decodes a Confluent-framed Protobuf value: the schema comes from Apicurio's resolver (fetched
     * by content id, parsed with its references by Apicurio's Protobuf parser); the message type is
     * the one the index list names (zigzag varints: a count, then one index per nesting level; a
     * lone 0 stands for [0]), which Apicurio's ProtobufKafkaDeserializer skips without using.
     */
    private static Message decodeProtobuf(ProtobufKafkaDeserializer<?> d, byte[] v) throws Exception {
        if (v.length < 5 || v[0] != 0) {
            throw new IllegalArgumentException("not Confluent-framed: no magic byte 0 and 4-byte id");
        }
        long id = Integer.toUnsignedLong(ByteBuffer.wrap(v, 1, 4).getInt());
        ProtobufSchema schema = d.getSchemaResolver()
                .resolveSchemaByArtifactReference(ArtifactReference.fromContentId(id))
                .getParsedSchema().getParsedSchema();
        CodedInputStream in = CodedInputStream.newInstance(v, 5, v.length - 5);
        int n = in.readSInt32();
        List<Integer> path = new ArrayList<>();
        if (n == 0) {
            path.add(0);
        }
        for (int i = 0; i < n; i++) {
            path.add(in.readSInt32());
        }
        Descriptor type = schema.getFileDescriptor().getMessageTypes().get(path.get(0));
        for (int i = 1; i < path.size(); i++) {
            type = type.getNestedTypes().get(path.get(i));
        }
        return DynamicMessage.parseFrom(type, in);
    }

    private static JsonNode toJson(Object value) throws Exception {
        if (value instanceof GenericContainer || value instanceof GenericData.Record) {
            return JSON.readTree(GenericData.get().toString(value));
        }
        if (value instanceof Message m) {
            return JSON.readTree(JsonFormat.printer().preservingProtoFieldNames().print(m));
        }
        return JSON.valueToTree(value);
    }

    private static void usage(String why) {
        System.err.println("ConfluentConsumer: " + why);
        System.err.println("usage: ConfluentConsumer --bootstrap HOST:PORT --registry URL --topic NAME=avro|protobuf|protobuf-apicurio|json"
                + " ... [--count N] [--timeout-ms MS] [--user U --password-file F] [--serde KEY=VALUE ...]");
        System.exit(2);
    }
}
