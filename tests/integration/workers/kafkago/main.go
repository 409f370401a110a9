// One kafka-go 0.2.1 group consumer in its own process, driven over stdin, reporting JSON lines
// on stdout in the schema of ../group_consumer.py, so that the same test helpers read both.
//
//	kafkago-worker -bootstrap HOST:PORT -topic T -group G [-session-ms 30000]
//	    [-heartbeat-ms 3000] [-max-wait-ms 10000] [-commit-ms 1000] [-client-id ID]
//
// A zero interval keeps kafka-go's default (session 30 s, heartbeat 3 s, MaxWait 10 s), and an
// empty client id keeps kafka-go's default ("<program>@<host> (github.com/segmentio/kafka-go)",
// the same for every process of one program on one host).
//
// Reports, one JSON object a line, each with `t` (CLOCK_MONOTONIC seconds, as the Python workers)
// and `at` (wall clock, epoch seconds, to compare with a producer's send time):
//
//   - {"ev": "started"} once the reader exists;
//   - {"ev": "joined", "member_id": ..., "generation": n} after each JoinGroup;
//   - {"ev": "assignment", "partitions": [...]}: the partitions owned from then on ([] when a
//     rebalance begins, since kafka-go stops every partition reader first);
//   - {"ev": "message", "partition": p, "offset": o, "value": "...", "ts": ms} per record, `ts`
//     the record's own (producer) timestamp in epoch milliseconds;
//   - {"ev": "committed", "offsets": {"p": next offset, ...}} after each successful commit;
//   - {"ev": "closed"} after a graceful close (LeaveGroup), just before exiting;
//   - {"ev": "error", "error": "..."} for anything the client reports.
//
// kafka-go 0.2.1 has no rebalance callbacks: the membership reports come from its log lines.
// Commits are synchronous (CommitInterval 0) and batched: every -commit-ms the latest fetched
// record of each partition is committed, and at once on the `commit` command. Commands, one a
// line on stdin: `commit`, `close`; end of input closes too.
//
// MinBytes is 1: with kafka-go's default (MinBytes = MaxBytes = 1 MB) every fetch of a partition
// receiving a few records a second would wait the full MaxWait, and delivery latency would be
// MaxWait, whatever the group does.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	kafka "github.com/segmentio/kafka-go"
)

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func monotonic() float64 {
	var ts syscall.Timespec
	// CLOCK_MONOTONIC (1): the clock Python's time.monotonic() reads on Linux.
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func emit(ev string, fields map[string]interface{}) {
	record := map[string]interface{}{"ev": ev, "t": monotonic(),
		"at": float64(time.Now().UnixNano()) / 1e9}
	for k, v := range fields {
		record[k] = v
	}
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(record)
}

// membershipLog turns kafka-go's log lines about the group into reports.
type membershipLog struct{}

var (
	joinedLine     = regexp.MustCompile(`joinGroup succeeded .*generationID=(-?\d+), memberID=(.*?)\s*$`)
	subscribedLine = regexp.MustCompile(`subscribed to partitions: map\[(.*)\]`)
	partitionPair  = regexp.MustCompile(`(\d+):-?\d+`)
)

func (membershipLog) Write(line []byte) (int, error) {
	text := string(line)
	switch {
	case strings.Contains(text, "rebalancing consumer group"):
		emit("assignment", map[string]interface{}{"partitions": []int{}})
	case joinedLine.MatchString(text):
		m := joinedLine.FindStringSubmatch(text)
		generation, _ := strconv.Atoi(m[1])
		emit("joined", map[string]interface{}{"member_id": m[2], "generation": generation})
	case subscribedLine.MatchString(text):
		partitions := []int{}
		for _, pair := range partitionPair.FindAllStringSubmatch(subscribedLine.FindStringSubmatch(text)[1], -1) {
			p, _ := strconv.Atoi(strings.SplitN(pair[0], ":", 2)[0])
			partitions = append(partitions, p)
		}
		sort.Ints(partitions)
		emit("assignment", map[string]interface{}{"partitions": partitions})
	}
	if os.Getenv("KAFKAGO_WORKER_DEBUG") != "" {
		os.Stderr.Write(line)
	}
	return len(line), nil
}

type errorLog struct{}

func (errorLog) Write(line []byte) (int, error) {
	if strings.HasPrefix(string(line), "Syncing ") { // SyncGroup's progress, not an error
		return membershipLog{}.Write(line)
	}
	emit("error", map[string]interface{}{"error": strings.TrimSpace(string(line))})
	return len(line), nil
}

// pending holds the latest fetched record of each partition, not yet committed.
type pending struct {
	sync.Mutex
	latest map[int]kafka.Message
}

func (p *pending) take() []kafka.Message {
	p.Lock()
	defer p.Unlock()
	msgs := make([]kafka.Message, 0, len(p.latest))
	for _, m := range p.latest {
		msgs = append(msgs, m)
	}
	p.latest = map[int]kafka.Message{}
	return msgs
}

func (p *pending) putBack(msgs []kafka.Message) {
	p.Lock()
	defer p.Unlock()
	for _, m := range msgs {
		if newer, ok := p.latest[m.Partition]; !ok || newer.Offset < m.Offset {
			p.latest[m.Partition] = m
		}
	}
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic := flag.String("topic", "", "topic to consume")
	group := flag.String("group", "", "consumer group")
	clientID := flag.String("client-id", "", "client id (empty: kafka-go's default)")
	sessionMs := flag.Int("session-ms", 0, "session timeout (0: kafka-go's 30 s)")
	heartbeatMs := flag.Int("heartbeat-ms", 0, "heartbeat interval (0: kafka-go's 3 s)")
	maxWaitMs := flag.Int("max-wait-ms", 0, "fetch MaxWait (0: kafka-go's 10 s)")
	commitMs := flag.Int("commit-ms", 1000, "commit the consumed positions this often")
	flag.Parse()
	if *topic == "" || *group == "" {
		fmt.Fprintln(os.Stderr, "-topic and -group are required")
		os.Exit(2)
	}

	dialer := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, ClientID: *clientID}
	if *clientID == "" {
		dialer.ClientID = kafka.DefaultClientID
	}
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           []string{*bootstrap},
		GroupID:           *group,
		Topic:             *topic,
		Dialer:            dialer,
		MinBytes:          1,
		MaxBytes:          1 << 20,
		MaxWait:           time.Duration(*maxWaitMs) * time.Millisecond,
		SessionTimeout:    time.Duration(*sessionMs) * time.Millisecond,
		HeartbeatInterval: time.Duration(*heartbeatMs) * time.Millisecond,
		Logger:            log.New(membershipLog{}, "", 0),
		ErrorLogger:       log.New(errorLog{}, "", 0),
	})
	emit("started", nil)

	ctx, cancel := context.WithCancel(context.Background())
	uncommitted := &pending{latest: map[int]kafka.Message{}}
	commitNow := make(chan chan struct{})
	var commits sync.WaitGroup
	commits.Add(1)
	go func() { // the committer: one synchronous CommitMessages at a time
		defer commits.Done()
		ticker := time.NewTicker(time.Duration(*commitMs) * time.Millisecond)
		defer ticker.Stop()
		for {
			var done chan struct{}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			case done = <-commitNow:
			}
			msgs := uncommitted.take()
			if len(msgs) > 0 || done != nil {
				if err := reader.CommitMessages(ctx, msgs...); err != nil {
					uncommitted.putBack(msgs)
					if ctx.Err() == nil {
						emit("error", map[string]interface{}{"error": "commit: " + err.Error()})
					}
				} else {
					offsets := map[string]int64{}
					for _, m := range msgs {
						offsets[strconv.Itoa(m.Partition)] = m.Offset + 1
					}
					emit("committed", map[string]interface{}{"offsets": offsets})
				}
			}
			if done != nil {
				close(done)
			}
		}
	}()

	go func() { // the fetcher
		for {
			m, err := reader.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				emit("error", map[string]interface{}{"error": "fetch: " + err.Error()})
				time.Sleep(100 * time.Millisecond)
				continue
			}
			emit("message", map[string]interface{}{"partition": m.Partition, "offset": m.Offset,
				"value": string(m.Value), "topic": m.Topic, "ts": m.Time.UnixNano() / 1e6})
			uncommitted.putBack([]kafka.Message{m})
		}
	}()

	commands := make(chan string)
	go func() {
		buf := make([]byte, 0, 256)
		one := make([]byte, 1)
		for {
			n, err := os.Stdin.Read(one)
			if err != nil || n == 0 {
				commands <- "close"
				return
			}
			if one[0] != '\n' {
				buf = append(buf, one[0])
				continue
			}
			if line := strings.TrimSpace(string(buf)); line != "" {
				commands <- line
			}
			buf = buf[:0]
		}
	}()

	for command := range commands {
		switch command {
		case "commit":
			done := make(chan struct{})
			commitNow <- done
			<-done
		case "close":
			done := make(chan struct{})
			commitNow <- done
			<-done
			cancel()
			commits.Wait()
			if err := reader.Close(); err != nil {
				emit("error", map[string]interface{}{"error": "close: " + err.Error()})
			}
			emit("closed", nil)
			return
		}
	}
}
