package store

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TxnResult is the outcome of Etcd.Txn.
type TxnResult struct {
	// Committed reports whether every check held, so the onSuccess ops ran.
	// When false the onFailure ops ran.
	Committed bool
	// Revision is the store revision after the transaction.
	Revision int64
	// Results has one entry per op of the branch that ran, in order.
	Results []OpResult
}

// OpResult is what one transaction op did.
type OpResult struct {
	// Op is the op this result belongs to.
	Op Op
	// KV is the key read by an OpGet, or nil when it does not exist (and for
	// the other op types).
	KV *KV
	// Deleted is how many keys an OpDelete or OpDeletePrefix removed.
	Deleted int64
}

// DoTransaction runs onSuccess when every check holds and onFailure
// otherwise, atomically, and reports whether the checks held. A check holds
// when the key's KV.Version equals Compare.ExpectedVersion, or, for an
// ExpectedVersion of 0, when the key does not exist. OpGet results are
// discarded; use Txn to read them.
func (s *Etcd) DoTransaction(ctx context.Context, checks []Compare, onSuccess []Op, onFailure []Op) (bool, error) {
	res, err := s.Txn(ctx, checks, onSuccess, onFailure)
	if err != nil {
		return false, err
	}
	return res.Committed, nil
}

// Txn is DoTransaction that also returns the revision after the transaction
// and the result of each op that ran.
func (s *Etcd) Txn(ctx context.Context, checks []Compare, onSuccess []Op, onFailure []Op) (*TxnResult, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("run transaction: %w", err)
	}
	cmps := make([]clientv3.Cmp, 0, len(checks))
	for _, c := range checks {
		if c.Key == "" {
			return nil, fmt.Errorf("run transaction: check: %w: empty key", ErrInvalidArgument)
		}
		if c.ExpectedVersion < 0 {
			return nil, fmt.Errorf("run transaction: check %q: %w: negative version %d", c.Key, ErrInvalidArgument, c.ExpectedVersion)
		}
		cmp := clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.ExpectedVersion)
		if c.Prefix {
			cmp = cmp.WithPrefix()
		}
		cmps = append(cmps, cmp)
	}
	thenOps, err := toEtcdOps(onSuccess)
	if err != nil {
		return nil, fmt.Errorf("run transaction: success branch: %w", err)
	}
	elseOps, err := toEtcdOps(onFailure)
	if err != nil {
		return nil, fmt.Errorf("run transaction: failure branch: %w", err)
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(thenOps...).Else(elseOps...).Commit()
	if err != nil {
		return nil, fmt.Errorf("run transaction on %s: %w", describeChecks(checks), err)
	}
	ran := onFailure
	if resp.Succeeded {
		ran = onSuccess
	}
	res := &TxnResult{Committed: resp.Succeeded, Revision: resp.Header.Revision}
	for i, op := range ran {
		r := OpResult{Op: op}
		if i < len(resp.Responses) {
			switch {
			case resp.Responses[i].GetResponseRange() != nil:
				if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
					kv := fromPB(kvs[0])
					r.KV = &kv
				}
			case resp.Responses[i].GetResponseDeleteRange() != nil:
				r.Deleted = resp.Responses[i].GetResponseDeleteRange().Deleted
			}
		}
		res.Results = append(res.Results, r)
	}
	return res, nil
}

// toEtcdOps converts ops, refusing what could do damage by mistake.
func toEtcdOps(ops []Op) ([]clientv3.Op, error) {
	out := make([]clientv3.Op, 0, len(ops))
	for _, op := range ops {
		if op.Key == "" {
			return nil, fmt.Errorf("%s op: %w: empty key", op.Type, ErrInvalidArgument)
		}
		switch op.Type {
		case OpPut:
			out = append(out, clientv3.OpPut(op.Key, string(op.Value)))
		case OpDelete:
			out = append(out, clientv3.OpDelete(op.Key))
		case OpGet:
			out = append(out, clientv3.OpGet(op.Key))
		case OpDeletePrefix:
			out = append(out, clientv3.OpDelete(op.Key, clientv3.WithPrefix()))
		default:
			return nil, fmt.Errorf("op on %q: %w: unknown op type %d", op.Key, ErrInvalidArgument, int(op.Type))
		}
	}
	return out, nil
}

// describeChecks names the checked keys for error messages.
func describeChecks(checks []Compare) string {
	switch len(checks) {
	case 0:
		return "no checks"
	case 1:
		return fmt.Sprintf("check of %q", checks[0].Key)
	default:
		return fmt.Sprintf("checks of %q and %d more", checks[0].Key, len(checks)-1)
	}
}

// fromPB converts an etcd key-value.
func fromPB(kv *mvccpb.KeyValue) KV {
	return KV{
		Key:            string(kv.Key),
		Value:          kv.Value,
		Version:        kv.ModRevision,
		CreateRevision: kv.CreateRevision,
	}
}
