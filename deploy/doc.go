// Package deploy checks the production shape without Docker or a cluster: the root
// docker-compose.yml, the Dockerfile's targets, the kustomize tree under k8s/, the Grafana
// provisioning under grafana/ and the ClickHouse cluster DDL. It is its own module so that the
// production modules never link the Kubernetes and Compose libraries these checks need.
package deploy
