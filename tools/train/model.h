/*
 * model.h - the dense half of a DLRM: the bottom and top MLPs, the
 * pairwise dot-product interaction, the loss, and their backward passes.
 *
 * The embedding bags are not here: the trainer gathers them from the store
 * into the model's interaction input and hands their gradients back to the
 * store. One step, for a batch of n samples, is
 *
 *   model_forward(dense, n)          bottom MLP; fills vec[b][0]
 *   (trainer writes vec[b][1 + t] = pooled embedding of table t)
 *   model_interact(n)                dots of the 1 + T vectors, top MLP
 *   model_loss(labels, n)            logits -> mean binary cross-entropy
 *   model_backward(n)                grads of the MLP weights, and of
 *                                    every vec[b][1 + t] in dvec
 *   model_step()                     SGD or Adagrad on the MLP weights
 *
 * Every matrix product is a cblas_sgemm, every other sum is taken in a
 * fixed order, and nothing is random after model_init: given the same
 * inputs and the same BLAS thread count, the weights are the same bits.
 *
 * A model is used by one thread at a time (BLAS may use its own threads
 * inside a call).
 */
#ifndef ET_TRAIN_MODEL_H
#define ET_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_LAYERS 8

enum model_optim {
	MODEL_SGD = 0,
	MODEL_ADAGRAD = 1,
};

/* One fully connected layer: y = x W^T + b, then ReLU if relu. */
struct layer {
	int in, out;
	int relu;
	float *w, *b;	/* out x in, out */
	float *gw, *gb; /* their gradients for the current batch */
	float *sw, *sb; /* Adagrad's sums of squared gradients */
	const float *x; /* the input of the last forward (n x in) */
	float *y;	/* its output (max_batch x out) */
	float *dy;	/* gradient at the output (max_batch x out) */
};

struct mlp {
	int nlayers;
	struct layer l[MODEL_MAX_LAYERS];
};

/* Shapes and hyper-parameters; the trainer fills it from its options. */
struct model_config {
	int ndense;		       /* dense features (13) */
	int ntables;		       /* embedding bags per sample */
	int dim;		       /* embedding dimension = bottom output */
	int bot[MODEL_MAX_LAYERS - 1]; /* bottom hidden sizes; dim follows */
	int nbot;
	int top[MODEL_MAX_LAYERS - 1]; /* top hidden sizes; 1 follows */
	int ntop;
	int max_batch;
	enum model_optim optim;
	float lr;
	float eps;     /* Adagrad's epsilon */
	uint64_t seed; /* initial weights */
};

struct model {
	struct model_config c;
	struct mlp bot, top;
	int nvec;      /* 1 + ntables */
	int npairs;    /* nvec * (nvec - 1) / 2 */
	float *vec;    /* max_batch x nvec x dim: bottom output, then bags */
	float *dvec;   /* its gradient */
	float *zin;    /* max_batch x (dim + npairs): the top MLP's input */
	float *dzin;   /* its gradient */
	float *gram;   /* nvec x nvec scratch */
	float *logit;  /* points at the top MLP's output (max_batch) */
	float *dlogit; /* and at its gradient */
};

/* Allocates and initializes a model; returns 0 or -ENOMEM / -EINVAL. */
int model_init(struct model *m, const struct model_config *c);
void model_free(struct model *m);

/* Bottom MLP over dense (n x ndense); its output lands in vec[b][0]. */
void model_forward(struct model *m, const float *dense, int n);

/* Interaction and top MLP; the logits are at m->logit afterwards. */
void model_interact(struct model *m, int n);

/* Mean binary cross-entropy of the logits against labels (0 or 1), and
 * its gradient at the logits. Returns the loss. */
double model_loss(struct model *m, const float *labels, int n);

/* The same for n samples of a batch of total: returns the sum (not the
 * mean) of their losses, and the gradient at each logit is
 * (sigmoid(z) - y) / total, so that slices of a batch give the whole
 * batch's per-sample gradients. */
double model_loss_part(struct model *m, const float *labels, int n, int total);

/* Backward through everything after model_loss(): gradients of the MLP
 * weights, and dvec[b][1 + t], the gradient of each pooled bag. */
void model_backward(struct model *m, int n);

/* Applies the optimizer to the MLP weights with the gradients of the last
 * model_backward(). */
void model_step(struct model *m);

/* Log loss of a logit against a label, computed stably. */
double model_logloss(float logit, float label);

/*
 * The dense state as a flat list of float arrays, in a fixed order
 * (bottom then top, per layer: w, b, then Adagrad's sw, sb): for
 * checkpoints and for the weights checksum. model_state_count() says how
 * many arrays; model_state_array() names array i, its length in *len.
 * params_only limits the list to the weights (no optimizer state).
 */
int model_state_count(const struct model *m, int params_only);
float *model_state_array(struct model *m, int i, size_t *len);

/* The gradients of the weights in the same order as the weights in
 * model_state_array(i, ...), i < model_state_count(m, 1): what
 * model_backward() filled and model_step() applies. */
float *model_grad_array(struct model *m, int i, size_t *len);

/* Exact AUC of n scores against their 0/1 labels: the rank-sum statistic,
 * tied scores sharing their average rank. NAN if one class is missing. */
double auc_exact(const float *score, const float *label, size_t n);

#endif
