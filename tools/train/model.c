/*
 * model.c - DLRM's dense half: MLPs, dot-product interaction, loss, and
 * the backward of each, written out (see model.h for the call order).
 *
 * Layout. Activations are row-major, one row per sample. A layer's weight
 * W is out x in, so the forward is Y = X W^T + b, one cblas_sgemm; the
 * backward is dW = dY^T X, db = column sums of dY, and dX = dY W.
 *
 * The interaction takes, for each sample b, the nvec = 1 + T vectors
 *
 *   V_b = [ x_b ; e_b,0 ; ... ; e_b,T-1 ]      (nvec x dim, in m->vec)
 *
 * where x_b is the bottom MLP's output and e_b,t the pooled bag of table
 * t, forms the Gram matrix G = V_b V_b^T with one sgemm, and keeps its
 * strict lower triangle (i > j, row by row) after x_b:
 *
 *   zin_b = [ x_b , G[1][0], G[2][0], G[2][1], G[3][0], ... ]
 *
 * Since G is symmetric, the gradient of the loss with respect to V_b is
 * (D + D^T) V_b, D holding dG[i][j] at i > j: one more sgemm per sample
 * with D + D^T written out (its diagonal zero).
 *
 * The top MLP's last layer has one output and no ReLU: a logit. The loss
 * is the mean binary cross-entropy, max(z, 0) - y z + log(1 + e^-|z|),
 * whose gradient at z is (sigmoid(z) - y) / n.
 */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

/* splitmix64: the weights' initial values, from the seed alone. */
static uint64_t mix_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static float mix_uniform(uint64_t *s)
{
	/* [-1, 1) with 24 bits: exact in f32 */
	return (float)((int64_t)(mix_next(s) >> 40) - (1 << 23)) /
	       (float)(1 << 23);
}

static void layer_free(struct layer *l)
{
	free(l->w);
	free(l->b);
	free(l->gw);
	free(l->gb);
	free(l->sw);
	free(l->sb);
	free(l->y);
	free(l->dy);
	memset(l, 0, sizeof(*l));
}

/* Xavier-uniform weights, zero biases. */
static int layer_init(struct layer *l, int in, int out, int relu, int max_batch,
		      int adagrad, uint64_t *rng)
{
	size_t nw = (size_t)in * out;
	float a = sqrtf(6.0f / (float)(in + out));

	l->in = in;
	l->out = out;
	l->relu = relu;
	l->w = malloc(nw * sizeof(*l->w));
	l->b = calloc(out, sizeof(*l->b));
	l->gw = calloc(nw, sizeof(*l->gw));
	l->gb = calloc(out, sizeof(*l->gb));
	l->y = calloc((size_t)max_batch * out, sizeof(*l->y));
	l->dy = calloc((size_t)max_batch * out, sizeof(*l->dy));
	if (adagrad) {
		l->sw = calloc(nw, sizeof(*l->sw));
		l->sb = calloc(out, sizeof(*l->sb));
	}
	if (!l->w || !l->b || !l->gw || !l->gb || !l->y || !l->dy ||
	    (adagrad && (!l->sw || !l->sb)))
		return -ENOMEM;
	for (size_t i = 0; i < nw; i++)
		l->w[i] = a * mix_uniform(rng);
	return 0;
}

static int mlp_init(struct mlp *p, int in, const int *sizes, int nsizes,
		    int last_relu, int max_batch, int adagrad, uint64_t *rng)
{
	int ret;

	p->nlayers = nsizes;
	for (int i = 0; i < nsizes; i++) {
		int relu = i < nsizes - 1 || last_relu;

		ret = layer_init(&p->l[i], i ? sizes[i - 1] : in, sizes[i],
				 relu, max_batch, adagrad, rng);
		if (ret)
			return ret;
	}
	return 0;
}

static void mlp_free(struct mlp *p)
{
	for (int i = 0; i < p->nlayers; i++)
		layer_free(&p->l[i]);
	p->nlayers = 0;
}

int model_init(struct model *m, const struct model_config *c)
{
	int bot[MODEL_MAX_LAYERS], top[MODEL_MAX_LAYERS];
	int adagrad = c->optim == MODEL_ADAGRAD;
	uint64_t rng = c->seed ^ 0x6d6f64656c000000ULL; /* "model" */
	int ret, ztop;

	memset(m, 0, sizeof(*m));
	if (c->ndense < 1 || c->ntables < 1 || c->dim < 1 || c->max_batch < 1 ||
	    c->nbot < 0 || c->nbot > MODEL_MAX_LAYERS - 1 || c->ntop < 0 ||
	    c->ntop > MODEL_MAX_LAYERS - 1)
		return -EINVAL;
	m->c = *c;
	m->nvec = 1 + c->ntables;
	m->npairs = m->nvec * (m->nvec - 1) / 2;
	ztop = c->dim + m->npairs;

	memcpy(bot, c->bot, c->nbot * sizeof(*bot));
	bot[c->nbot] = c->dim;
	memcpy(top, c->top, c->ntop * sizeof(*top));
	top[c->ntop] = 1;
	ret = mlp_init(&m->bot, c->ndense, bot, c->nbot + 1, 1, c->max_batch,
		       adagrad, &rng);
	if (!ret)
		ret = mlp_init(&m->top, ztop, top, c->ntop + 1, 0, c->max_batch,
			       adagrad, &rng);
	if (ret)
		goto err;
	m->vec = calloc((size_t)c->max_batch * m->nvec * c->dim, sizeof(float));
	m->dvec =
	    calloc((size_t)c->max_batch * m->nvec * c->dim, sizeof(float));
	m->zin = calloc((size_t)c->max_batch * ztop, sizeof(float));
	m->dzin = calloc((size_t)c->max_batch * ztop, sizeof(float));
	m->gram = calloc((size_t)m->nvec * m->nvec, sizeof(float));
	if (!m->vec || !m->dvec || !m->zin || !m->dzin || !m->gram) {
		ret = -ENOMEM;
		goto err;
	}
	m->logit = m->top.l[m->top.nlayers - 1].y;
	m->dlogit = m->top.l[m->top.nlayers - 1].dy;
	return 0;
err:
	model_free(m);
	return ret;
}

void model_free(struct model *m)
{
	mlp_free(&m->bot);
	mlp_free(&m->top);
	free(m->vec);
	free(m->dvec);
	free(m->zin);
	free(m->dzin);
	free(m->gram);
	memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------ forward */

static void layer_forward(struct layer *l, const float *x, int n)
{
	l->x = x;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, l->out, l->in,
		    1.0f, x, l->in, l->w, l->in, 0.0f, l->y, l->out);
	for (int b = 0; b < n; b++) {
		float *y = l->y + (size_t)b * l->out;

		for (int j = 0; j < l->out; j++) {
			y[j] += l->b[j];
			if (l->relu && !(y[j] > 0.0f))
				y[j] = 0.0f;
		}
	}
}

static const float *mlp_forward(struct mlp *p, const float *x, int n)
{
	for (int i = 0; i < p->nlayers; i++) {
		layer_forward(&p->l[i], x, n);
		x = p->l[i].y;
	}
	return x;
}

void model_forward(struct model *m, const float *dense, int n)
{
	const float *x = mlp_forward(&m->bot, dense, n);
	int d = m->c.dim;

	for (int b = 0; b < n; b++)
		memcpy(m->vec + (size_t)b * m->nvec * d, x + (size_t)b * d,
		       d * sizeof(float));
}

void model_interact(struct model *m, int n)
{
	int d = m->c.dim, nv = m->nvec, zt = d + m->npairs;

	for (int b = 0; b < n; b++) {
		const float *v = m->vec + (size_t)b * nv * d;
		float *z = m->zin + (size_t)b * zt;
		int k = d;

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nv, nv, d,
			    1.0f, v, d, v, d, 0.0f, m->gram, nv);
		memcpy(z, v, d * sizeof(float));
		for (int i = 1; i < nv; i++)
			for (int j = 0; j < i; j++)
				z[k++] = m->gram[i * nv + j];
	}
	mlp_forward(&m->top, m->zin, n);
}

double model_logloss(float logit, float label)
{
	double z = logit;

	return (z > 0 ? z : 0) - (double)label * z + log1p(exp(-fabs(z)));
}

double model_loss_part(struct model *m, const float *labels, int n, int total)
{
	double sum = 0;

	for (int b = 0; b < n; b++) {
		float z = m->logit[b];
		float p = 1.0f / (1.0f + expf(-z));

		sum += model_logloss(z, labels[b]);
		m->dlogit[b] = (p - labels[b]) / (float)total;
	}
	return sum;
}

double model_loss(struct model *m, const float *labels, int n)
{
	return model_loss_part(m, labels, n, n) / n;
}

/* ----------------------------------------------------------- backward */

/* From l->dy: the weight gradients and, if dx, the input's gradient. The
 * ReLU mask is applied to dy first (y is zero exactly where it cut). */
static void layer_backward(struct layer *l, float *dx, int n)
{
	if (l->relu)
		for (size_t i = 0; i < (size_t)n * l->out; i++)
			if (!(l->y[i] > 0.0f))
				l->dy[i] = 0.0f;
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l->out, l->in, n,
		    1.0f, l->dy, l->out, l->x, l->in, 0.0f, l->gw, l->in);
	for (int j = 0; j < l->out; j++)
		l->gb[j] = 0.0f;
	for (int b = 0; b < n; b++)
		for (int j = 0; j < l->out; j++)
			l->gb[j] += l->dy[(size_t)b * l->out + j];
	if (dx)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, l->in,
			    l->out, 1.0f, l->dy, l->out, l->w, l->in, 0.0f, dx,
			    l->in);
}

/* The gradient at the MLP's output must be in its last layer's dy. */
static void mlp_backward(struct mlp *p, float *dx, int n)
{
	for (int i = p->nlayers - 1; i >= 0; i--)
		layer_backward(&p->l[i], i ? p->l[i - 1].dy : dx, n);
}

void model_backward(struct model *m, int n)
{
	int d = m->c.dim, nv = m->nvec, zt = d + m->npairs;
	struct layer *bl = &m->bot.l[m->bot.nlayers - 1];

	mlp_backward(&m->top, m->dzin, n);
	for (int b = 0; b < n; b++) {
		const float *v = m->vec + (size_t)b * nv * d;
		const float *dz = m->dzin + (size_t)b * zt;
		float *dv = m->dvec + (size_t)b * nv * d;
		int k = d;

		/* D + D^T, diagonal zero */
		for (int i = 0; i < nv; i++)
			m->gram[i * nv + i] = 0.0f;
		for (int i = 1; i < nv; i++)
			for (int j = 0; j < i; j++) {
				m->gram[i * nv + j] = dz[k];
				m->gram[j * nv + i] = dz[k];
				k++;
			}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nv, d,
			    nv, 1.0f, m->gram, nv, v, d, 0.0f, dv, d);
		/* the bottom output also feeds the top MLP directly */
		for (int c = 0; c < d; c++)
			bl->dy[(size_t)b * d + c] = dv[c] + dz[c];
	}
	mlp_backward(&m->bot, NULL, n);
}

/* --------------------------------------------------------------- step */

static void apply(float *w, const float *g, float *s, size_t n,
		  const struct model_config *c)
{
	if (c->optim == MODEL_ADAGRAD) {
		for (size_t i = 0; i < n; i++) {
			s[i] += g[i] * g[i];
			w[i] -= c->lr * g[i] / (sqrtf(s[i]) + c->eps);
		}
	} else {
		for (size_t i = 0; i < n; i++)
			w[i] -= c->lr * g[i];
	}
}

static void mlp_step(struct mlp *p, const struct model_config *c)
{
	for (int i = 0; i < p->nlayers; i++) {
		struct layer *l = &p->l[i];

		apply(l->w, l->gw, l->sw, (size_t)l->in * l->out, c);
		apply(l->b, l->gb, l->sb, l->out, c);
	}
}

void model_step(struct model *m)
{
	mlp_step(&m->bot, &m->c);
	mlp_step(&m->top, &m->c);
}

/* ------------------------------------------------------------- state */

static struct layer *layer_at(struct model *m, int i)
{
	return i < m->bot.nlayers ? &m->bot.l[i]
				  : &m->top.l[i - m->bot.nlayers];
}

int model_state_count(const struct model *m, int params_only)
{
	int nl = m->bot.nlayers + m->top.nlayers;

	return params_only || m->c.optim != MODEL_ADAGRAD ? 2 * nl : 4 * nl;
}

float *model_state_array(struct model *m, int i, size_t *len)
{
	int nl = m->bot.nlayers + m->top.nlayers;
	int state = i >= 2 * nl;
	struct layer *l = layer_at(m, (i % (2 * nl)) / 2);

	if (i % 2 == 0) {
		*len = (size_t)l->in * l->out;
		return state ? l->sw : l->w;
	}
	*len = l->out;
	return state ? l->sb : l->b;
}

float *model_grad_array(struct model *m, int i, size_t *len)
{
	struct layer *l = layer_at(m, i / 2);

	if (i % 2 == 0) {
		*len = (size_t)l->in * l->out;
		return l->gw;
	}
	*len = l->out;
	return l->gb;
}

/* ------------------------------------------------------------- scoring */

struct scored {
	float s;
	float y;
};

static int cmp_scored(const void *a, const void *b)
{
	float x = ((const struct scored *)a)->s;
	float y = ((const struct scored *)b)->s;

	return x < y ? -1 : x > y;
}

/* Exact AUC: the rank-sum statistic, tied scores sharing their average
 * rank. NAN if one class is missing. */
double auc_exact(const float *score, const float *label, size_t n)
{
	struct scored *v = malloc(n * sizeof(*v));
	double pos = 0, neg = 0, rank_sum = 0;

	if (!v)
		return NAN;
	for (size_t i = 0; i < n; i++) {
		v[i].s = score[i];
		v[i].y = label[i];
	}
	qsort(v, n, sizeof(*v), cmp_scored);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		double p = 0, avg;

		while (j < n && v[j].s == v[i].s) {
			p += v[j].y > 0.5f;
			j++;
		}
		avg = ((double)i + 1 + (double)j) / 2; /* ranks i+1 .. j */
		rank_sum += p * avg;
		pos += p;
		neg += (double)(j - i) - p;
		i = j;
	}
	free(v);
	if (!pos || !neg)
		return NAN;
	return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}
