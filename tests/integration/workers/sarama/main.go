// One sarama (Debian's golang-github-shopify-sarama-dev, 1.22.1) group consumer in its own
// process, reporting JSON lines in the schema of ../kafkago/main.go: started, joined (member id,
// generation), assignment, message (with `ts`, the record's timestamp), committed, closed,
// error; each with `t` (CLOCK_MONOTONIC) and `at` (wall clock, epoch seconds).
//
//	sarama-worker -bootstrap HOST:PORT -topic T -group G [-session-ms 10000] [-heartbeat-ms 3000]
//
// A zero interval keeps sarama's default (session 10 s, heartbeat 3 s, MaxWaitTime 250 ms).
// Offsets are marked per record and committed by sarama's auto-commit (every second); the
// `committed` report comes after each second's marks. Commands on stdin: `close` (or end of
// input) closes the group gracefully (LeaveGroup).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/Shopify/sarama"
)

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func monotonic() float64 {
	var ts syscall.Timespec
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

type handler struct {
	topic string
	mu    sync.Mutex
	marks map[int32]int64
}

func (h *handler) Setup(s sarama.ConsumerGroupSession) error {
	emit("joined", map[string]interface{}{"member_id": s.MemberID(), "generation": s.GenerationID()})
	partitions := []int{}
	for _, p := range s.Claims()[h.topic] {
		partitions = append(partitions, int(p))
	}
	sort.Ints(partitions)
	emit("assignment", map[string]interface{}{"partitions": partitions})
	return nil
}

func (h *handler) Cleanup(s sarama.ConsumerGroupSession) error {
	emit("assignment", map[string]interface{}{"partitions": []int{}})
	return nil
}

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		emit("message", map[string]interface{}{"partition": m.Partition, "offset": m.Offset,
			"value": string(m.Value), "topic": m.Topic, "ts": m.Timestamp.UnixNano() / 1e6})
		s.MarkMessage(m, "")
		h.mu.Lock()
		h.marks[m.Partition] = m.Offset + 1
		h.mu.Unlock()
	}
	return nil
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic := flag.String("topic", "", "topic")
	group := flag.String("group", "", "group")
	clientID := flag.String("client-id", "", "client id (empty: sarama's default)")
	sessionMs := flag.Int("session-ms", 0, "session timeout (0: sarama's 10 s)")
	heartbeatMs := flag.Int("heartbeat-ms", 0, "heartbeat interval (0: sarama's 3 s)")
	flag.Parse()

	config := sarama.NewConfig()
	config.Version = sarama.V2_0_0_0 // consumer groups need 0.10.2 or later
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Return.Errors = true
	if *clientID != "" {
		config.ClientID = *clientID
	}
	if *sessionMs > 0 {
		config.Consumer.Group.Session.Timeout = time.Duration(*sessionMs) * time.Millisecond
	}
	if *heartbeatMs > 0 {
		config.Consumer.Group.Heartbeat.Interval = time.Duration(*heartbeatMs) * time.Millisecond
	}
	consumer, err := sarama.NewConsumerGroup([]string{*bootstrap}, *group, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for err := range consumer.Errors() {
			emit("error", map[string]interface{}{"error": err.Error()})
		}
	}()
	h := &handler{topic: *topic, marks: map[int32]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var consuming sync.WaitGroup
	consuming.Add(1)
	go func() {
		defer consuming.Done()
		for ctx.Err() == nil {
			if err := consumer.Consume(ctx, []string{*topic}, h); err != nil {
				emit("error", map[string]interface{}{"error": "consume: " + err.Error()})
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	go func() { // what the auto-commit (every second) has had to commit
		for range time.Tick(time.Second) {
			h.mu.Lock()
			offsets := map[string]int64{}
			for p, o := range h.marks {
				offsets[strconv.Itoa(int(p))] = o
			}
			h.mu.Unlock()
			emit("committed", map[string]interface{}{"offsets": offsets})
		}
	}()
	emit("started", nil)

	buf := make([]byte, 0, 64)
	one := make([]byte, 1)
	for {
		n, err := os.Stdin.Read(one)
		if err != nil || n == 0 || (one[0] == '\n' && strings.TrimSpace(string(buf)) == "close") {
			break
		}
		if one[0] == '\n' {
			buf = buf[:0]
		} else {
			buf = append(buf, one[0])
		}
	}
	cancel()
	consuming.Wait()
	if err := consumer.Close(); err != nil {
		emit("error", map[string]interface{}{"error": "close: " + err.Error()})
	}
	emit("closed", nil)
}
