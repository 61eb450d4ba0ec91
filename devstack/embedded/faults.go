package embedded

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tallypipeline/tally/devstack/kafkabroker"
)

// kafkaFaults makes SIGUSR1 move every partition leader of the embedded Kafka (a leader
// election) and SIGUSR2 remove one of its brokers (a broker lost for good), until the returned
// stop: fault drills on a cluster of embedded.kafka_brokers without Docker; the cluster test
// runs the first. Each fault is logged.
func kafkaFaults(k *kafkabroker.Broker, logger *slog.Logger) (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				k.MoveLeaders()
				logger.Warn("embedded kafka: every partition leader moved (SIGUSR1)")
				continue
			}
			if id, err := k.RemoveBroker(); err != nil {
				logger.Error("embedded kafka: SIGUSR2", "err", err)
			} else {
				logger.Warn("embedded kafka: broker removed (SIGUSR2)", "node", id)
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(sigs)
		<-done
	}
}
