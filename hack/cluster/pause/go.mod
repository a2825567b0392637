module ddp-operator.io/hack/cluster/pause

go 1.26.0
