set terminal pngcairo size 1200,480 font ',10'
set output 'bench/quality/results/field/expected_attention.png'
set multiplot layout 1,2 title 'SmolLM2-135M-Instruct.Q4_1.gguf on the documents of python-howto: 12 windows x 2304 tokens, prompt 2048; error bars = standard error over windows'
set grid
set xlabel 'budget k / prompt length'
set xrange [0:1]
set key top right
set ylabel 'NLL - full-cache NLL (nats/token; full cache: 2.155)'
plot 0 title 'full cache' lw 2 dt 2 lc 'black', 'bench/quality/results/field/expected_attention_plot.dat' index 0 using 1:8:9 with yerrorlines lt 1 title 'h2o' noenhanced, 'bench/quality/results/field/expected_attention_plot.dat' index 1 using 1:8:9 with yerrorlines lt 2 title 'expected-attention' noenhanced, 'bench/quality/results/field/expected_attention_plot.dat' index 2 using 1:8:9 with yerrorlines lt 3 title 'expected-attention+adakv' noenhanced
set ylabel 'KL(full || policy) (nats)'
set logscale y
plot 'bench/quality/results/field/expected_attention_plot.dat' index 0 using 1:4:5 with yerrorlines lt 1 title 'h2o' noenhanced, 'bench/quality/results/field/expected_attention_plot.dat' index 1 using 1:4:5 with yerrorlines lt 2 title 'expected-attention' noenhanced, 'bench/quality/results/field/expected_attention_plot.dat' index 2 using 1:4:5 with yerrorlines lt 3 title 'expected-attention+adakv' noenhanced
unset multiplot
